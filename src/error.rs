//! Failure classes and their exit codes, mapped in one place.
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | load/soak: every level passed |
//! | 1    | load/soak: a verdict failed or a level was skipped |
//! | 2    | bad usage or configuration, named: a flag's value, a plan, a journal or output path (a missing folder, a link, a folder), `report` on a missing or foreign file (also: no Docker engine answers, an image not on the engine) |
//! | 3    | the harness could not measure honestly (connect floor, target unhealthy, no GPU) |
//! | 4    | load/soak: the journal could not be written (disk full, I/O error): the run stopped at once and what came after is not on record |
//! | 101  | never: a panic is a bug (bad input is 2) |
//! | 125  | wrap: witness itself failed (as `timeout` and `docker run` do) |
//! | 126/127 | wrap: the command could not be executed / was not found |
//! | other | wrap: the child's own status (128+N for signal N) |

use crate::server::process::SpawnError;

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
        if cause.is::<UsageError>() || cause.is::<crate::server::logs::BadPattern>() {
            return USAGE;
        }
        if cause.is::<Refusal>() {
            return REFUSED;
        }
        if cause.is::<crate::journal::JournalLost>() {
            return JOURNAL_LOST;
        }
        if let Some(s) = cause.downcast_ref::<SpawnError>() {
            return s.exit_code();
        }
    }
    internal
}
