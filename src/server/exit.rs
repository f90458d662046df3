//! What an exit status means, in words: a code versus death by a signal, core dumps, and the shell
//! conventions (124 from `timeout` and watchdogs, 125–127, 128+N relayed signals), and a container's
//! end as the engine tells it (its `OOMKilled` flag and `kill` events are the only proof of either).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use crate::journal::meaning::signal_says;
pub use crate::journal::meaning::{code_meaning, signal_name};

/// One process's end, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, when it exited rather than being killed.
    pub code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    pub core_dumped: bool,
}

impl ExitInfo {
    pub fn from_status(st: ExitStatus) -> Self {
        Self {
            code: st.code(),
            signal: st.signal(),
            core_dumped: st.core_dumped(),
        }
    }

    /// The shell's view of it, and witness's own exit code: the code, or 128+N for signal N.
    pub fn status(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }

    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }

    pub fn meaning(&self) -> String {
        let mut m = match (self.code, self.signal) {
            (_, Some(sig)) => format!(
                "killed by {} ({}){}",
                signal_name(sig),
                signal_says(sig),
                if sig == libc::SIGKILL {
                    "; SIGKILL alone is not proof of an OOM kill"
                } else {
                    ""
                }
            ),
            (Some(code), None) => code_meaning(code),
            (None, None) => "ended for an unknown reason".into(),
        };
        if self.core_dumped {
            m.push_str("; core dumped");
        }
        m
    }
}

/// A container's end, from what the engine said: the exit code of its `die` event, its `OOMKilled`
/// flag (or an `oom` event), and the signal of a `kill` event just before the die.
///
/// The engine reports 128+N when the container's process died of signal N. A 137 alone is SIGKILL
/// from somewhere, never proof of an OOM kill: only `OOMKilled` says that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineExit {
    pub code: i32,
    pub oom_killed: bool,
    pub kill_signal: Option<i32>,
}

impl EngineExit {
    /// The signal it died of, when the engine's word accounts for the code.
    pub fn signal(&self) -> Option<i32> {
        if self.oom_killed && self.code == 128 + libc::SIGKILL {
            return Some(libc::SIGKILL);
        }
        self.kill_signal.filter(|s| self.code == 128 + s)
    }

    /// As an [`ExitInfo`]: death by a signal the engine vouches for, else the plain code.
    pub fn info(&self) -> ExitInfo {
        match self.signal() {
            Some(sig) => ExitInfo {
                code: None,
                signal: Some(sig),
                core_dumped: false,
            },
            None => ExitInfo {
                code: Some(self.code),
                signal: None,
                core_dumped: false,
            },
        }
    }

    pub fn meaning(&self) -> String {
        let code = self.code;
        if self.oom_killed {
            return if code == 128 + libc::SIGKILL {
                "killed by the kernel OOM killer (OOMKilled): the container reached its memory limit"
                    .into()
            } else {
                format!(
                    "{}; the engine also reports OOMKilled: the kernel OOM killer killed a process in the container",
                    code_meaning(code)
                )
            };
        }
        if let Some(sig) = self.signal() {
            let name = signal_name(sig);
            return if sig == libc::SIGKILL {
                format!("killed by {name} sent through the engine (docker kill, docker stop after its grace, or witness stopping it); not an OOM kill: the engine reports OOMKilled false")
            } else {
                format!(
                    "killed by {name} sent through the engine (docker kill, docker stop, or witness stopping it: {})",
                    signal_says(sig)
                )
            };
        }
        match code {
            c if c > 128 && c < 128 + 65 => {
                let sig = c - 128;
                let name = signal_name(sig);
                let oom = if sig == libc::SIGKILL {
                    "; not an OOM kill: the engine reports OOMKilled false"
                } else {
                    ""
                };
                format!("exited {c}: {name} (128+{sig}), sent from inside the container or the host, not through the engine{oom}")
            }
            c => code_meaning(c),
        }
    }
}

/// Parses "SIGTERM", "TERM" or "15".
pub fn parse_signal(s: &str) -> Option<nix::sys::signal::Signal> {
    use std::str::FromStr;
    if let Ok(n) = s.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(n).ok();
    }
    let up = s.to_ascii_uppercase();
    let name = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    nix::sys::signal::Signal::from_str(&name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_death_reads_as_128_plus_n_and_is_named() {
        let e = ExitInfo {
            code: None,
            signal: Some(libc::SIGALRM),
            core_dumped: false,
        };
        assert_eq!(e.status(), 142);
        assert_eq!(e.signal_name().as_deref(), Some("SIGALRM"));
        assert!(e.meaning().contains("alarm"));
    }

    #[test]
    fn a_container_is_called_oom_killed_only_when_the_engine_says_so() {
        let oom = EngineExit {
            code: 137,
            oom_killed: true,
            kill_signal: None,
        };
        assert!(oom.meaning().contains("OOM killer (OOMKilled)"));
        assert_eq!(oom.info().signal_name().as_deref(), Some("SIGKILL"));
        assert_eq!(oom.info().status(), 137);

        let docker_kill = EngineExit {
            code: 137,
            oom_killed: false,
            kill_signal: Some(libc::SIGKILL),
        };
        let m = docker_kill.meaning();
        assert!(m.contains("SIGKILL sent through the engine"), "{m}");
        assert!(m.contains("not an OOM kill"), "{m}");
        assert_eq!(docker_kill.info().status(), 137);

        let bare = EngineExit {
            code: 137,
            oom_killed: false,
            kill_signal: None,
        };
        assert!(bare.meaning().contains("not an OOM kill"));
        assert_eq!(bare.info().code, Some(137));
    }

    #[test]
    fn a_container_that_exits_124_reads_like_a_process_that_did() {
        let e = EngineExit {
            code: 124,
            oom_killed: false,
            kill_signal: Some(libc::SIGTERM),
        };
        assert_eq!(e.meaning(), code_meaning(124));
        assert_eq!(e.info().code, Some(124));
    }

    #[test]
    fn signals_parse_by_name_or_number() {
        use nix::sys::signal::Signal;
        assert_eq!(parse_signal("TERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("sigkill"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("2"), Some(Signal::SIGINT));
        assert_eq!(parse_signal("nope"), None);
    }
}
