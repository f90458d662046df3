//! Failure classes and their exit codes, mapped in one place.
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | load/soak: every level passed |
//! | 1    | load/soak: a verdict failed or a level was skipped |
//! | 2    | bad usage or configuration, named: a flag's value, a plan, a journal or output path (a missing folder, a link, a folder), `report` on a missing or foreign file (also: no Docker engine answers, an image not on the engine; for load/soak a server command that is not there or not executable) |
//! | 3    | the harness could not measure honestly (connect floor, target unhealthy, no GPU, no nameserver answered for a URL's host) |
//! | 4    | load/soak: the journal could not be written (disk full, I/O error): the run stopped at once and what came after is not on record |
//! | 101  | never: a panic is a bug (bad input is 2) |
//! | 125  | wrap: witness itself failed (as `timeout` and `docker run` do) |
//! | 126/127 | wrap: the command could not be executed / was not found |
//! | other | wrap: the child's own status (128+N for signal N) |

use std::path::PathBuf;

// The producers' failures that have a class of their own live here, beside the table, so the table
// depends on nothing and the producers (journal, server) depend on it, never the other way round.

/// The journal could not be written (disk full, a file size limit, an I/O error): what happened
/// after `why` is not on record.
#[derive(Debug, thiserror::Error)]
#[error("the journal {} is incomplete: writing it failed {why}; {lost} event(s) after that point were not written (and up to 256 KiB buffered before it may be missing)", path.display())]
pub struct JournalLost {
    pub path: PathBuf,
    pub why: String,
    pub lost: u64,
}

/// A `--watch` value that is not a valid regular expression.
#[derive(Debug, thiserror::Error)]
#[error("--watch {given:?} is not a valid regular expression: {why}")]
pub struct BadPattern {
    pub given: String,
    pub why: String,
}

/// The command could not be started at all (exit 127 / 126 like a shell). The OS error is said
/// once, in this message (not also as a source, which `{:#}` would print a second time); a bare
/// name that is not found says it was looked up in PATH.
#[derive(Debug)]
pub struct SpawnError {
    pub command: String,
    pub source: std::io::Error,
}

impl std::error::Error for SpawnError {}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bare = !self.command.contains('/');
        match self.source.kind() {
            std::io::ErrorKind::NotFound if bare => write!(
                f,
                "could not start {:?}: no such command in PATH ({}); give its path (./{}) or install it",
                self.command,
                std::env::var("PATH").unwrap_or_default(),
                self.command
            ),
            std::io::ErrorKind::NotFound => write!(
                f,
                "could not start {:?}: no such file; give the path of the server's program after `--`",
                self.command
            ),
            std::io::ErrorKind::PermissionDenied => write!(
                f,
                "could not start {:?}: {}; the command after `--` must be an executable file (chmod +x it, or name its interpreter: `-- python3 app.py`)",
                self.command, self.source
            ),
            _ => write!(f, "could not start {:?}: {}", self.command, self.source),
        }
    }
}

impl SpawnError {
    pub fn exit_code(&self) -> i32 {
        match self.source.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        }
    }
}

/// An error whose reason the run already said (in its timeline, a REFUSED line): the last line
/// says this and no more, so a reason is printed once. The error it wraps still decides the exit
/// code.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AlreadySaid(pub String);

/// The user asked for something witness cannot do as given; the message names the flag or file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// witness refuses to measure, because the numbers would be the harness's, not the server's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

pub fn refuse(msg: impl Into<String>) -> anyhow::Error {
    Refusal(msg.into()).into()
}

pub const USAGE: i32 = 2;
pub const REFUSED: i32 = 3;
pub const JOURNAL_LOST: i32 = 4;
pub const WRAP_INTERNAL: i32 = 125;

/// The exit code for an error that ended a run; `internal` is the mode's code for its own failures.
pub fn exit_code(err: &anyhow::Error, internal: i32) -> i32 {
    for cause in err.chain() {
        if cause.is::<UsageError>() || cause.is::<BadPattern>() {
            return USAGE;
        }
        if cause.is::<Refusal>() {
            return REFUSED;
        }
        if cause.is::<JournalLost>() {
            return JOURNAL_LOST;
        }
        if let Some(s) = cause.downcast_ref::<SpawnError>() {
            return s.exit_code();
        }
    }
    internal
}
