//! What exit codes and signals mean, in words: pure, so analysis may use it as well as the
//! supervisor (124 from `timeout` and watchdogs, 125–127, 128+N relayed signals, and what each
//! signal usually means).

/// The conventions behind a plain exit code.
pub fn code_meaning(code: i32) -> String {
    match code {
        0 => "exited cleanly (0)".into(),
        124 => "exited 124: a timeout or watchdog fired (coreutils `timeout` and many watchdogs use 124)"
            .into(),
        125 => "exited 125: the wrapper itself failed (timeout/docker run use 125)".into(),
        126 => "exited 126: the command was found but could not be executed".into(),
        127 => "exited 127: command not found".into(),
        c if c > 128 && c < 128 + 65 => {
            let sig = c - 128;
            let name = signal_name(sig);
            if sig == libc::SIGKILL {
                format!(
                    "exited {c}: {name} as relayed by a shell (128+{sig}); it is not proof of an OOM kill"
                )
            } else {
                format!("exited {c}: {name} as relayed by a shell (128+{sig})")
            }
        }
        c => format!("exited with code {c} (a failure the program reported itself)"),
    }
}

pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

pub fn signal_says(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => {
            "uncatchable kill: the OOM killer, `kill -9`, or a supervisor's last resort"
        }
        libc::SIGTERM => "a polite request to stop",
        libc::SIGINT => "interrupt, as from Ctrl-C",
        libc::SIGALRM => "an alarm timer expired: a timer armed in the process",
        libc::SIGSEGV => "invalid memory access",
        libc::SIGABRT => "abort, as from a failed assertion or panic=abort",
        libc::SIGBUS => "bus error",
        libc::SIGHUP => "hang-up",
        libc::SIGQUIT => "quit",
        libc::SIGPIPE => "wrote to a closed pipe",
        libc::SIGXCPU => "CPU time limit exceeded",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_137_is_not_called_an_oom_kill() {
        let m = code_meaning(137);
        assert!(m.contains("SIGKILL"), "{m}");
        assert!(m.contains("not proof of an OOM kill"), "{m}");
    }

    #[test]
    fn exit_124_is_a_timeout_or_watchdog() {
        assert!(code_meaning(124).contains("timeout or watchdog"));
        assert!(code_meaning(127).contains("not found"));
        assert!(signal_says(libc::SIGALRM).contains("alarm"));
    }
}
