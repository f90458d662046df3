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

/// The line of a failed start's output that says why, as a person would pick it: the exception
/// ending a Python traceback, a panic's message, an address already in use, a line that names a
/// fatal error. `logged`: the (label, line) pairs the log reader journalled, oldest first; `tail`:
/// the raw last lines. None when no line stands out (the caller quotes the last).
pub fn decisive_line(logged: &[(String, String)], tail: &[&str]) -> Option<String> {
    const ENDS_TRACEBACK: &str = " (the exception ending a Python traceback)";
    if let Some(l) = logged
        .iter()
        .rev()
        .find_map(|(_, l)| l.strip_suffix(ENDS_TRACEBACK))
    {
        return Some(l.to_string());
    }
    if let Some((_, l)) = logged.iter().rev().find(|(label, _)| label == "panic") {
        return Some(l.to_string());
    }
    let lower = |l: &str| l.to_ascii_lowercase();
    let in_use = |l: &str| {
        let l = lower(l);
        l.contains("address already in use") || l.contains("eaddrinuse")
    };
    if let Some(l) = tail.iter().rev().find(|l| in_use(l)) {
        return Some(l.trim().to_string());
    }
    // An exception line the reader did not label: "NameError: …" at the start of a line.
    let exception = |l: &&&str| {
        let head = l.split(": ").next().unwrap_or("");
        !l.starts_with(' ')
            && l.contains(": ")
            && !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            && (head.ends_with("Error") || head.ends_with("Exception"))
    };
    if let Some(l) = tail.iter().rev().find(exception) {
        return Some(l.to_string());
    }
    let fatal = |l: &str| {
        let l = lower(l);
        l.contains("panicked at") || l.contains("fatal") || l.contains("error:")
    };
    tail.iter()
        .rev()
        .find(|l| fatal(l))
        .map(|l| l.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decisive_line_is_the_exception_not_the_last_words() {
        let logged = vec![
            ("traceback".to_string(), "Traceback (most recent call last):".to_string()),
            (
                "traceback".to_string(),
                "ModuleNotFoundError: No module named 'packaging' (the exception ending a Python traceback)"
                    .to_string(),
            ),
            ("exit".to_string(), "[ERROR] Shutting down: Master".to_string()),
        ];
        let tail = [
            "[ERROR] Shutting down: Master",
            "[ERROR] Reason: Worker failed to boot.",
        ];
        assert_eq!(
            decisive_line(&logged, &tail).as_deref(),
            Some("ModuleNotFoundError: No module named 'packaging'")
        );
        let tail = [
            "listening",
            "Error: listen EADDRINUSE: address already in use :::8080",
            "  at x",
        ];
        assert_eq!(
            decisive_line(&[], &tail).as_deref(),
            Some("Error: listen EADDRINUSE: address already in use :::8080")
        );
        let panic = vec![(
            "panic".to_string(),
            "thread 'main' panicked at src/main.rs:3:5: no config".to_string(),
        )];
        assert!(decisive_line(&panic, &["note: run with RUST_BACKTRACE=1"])
            .unwrap()
            .contains("no config"));
        assert_eq!(decisive_line(&[], &["bye"]), None);
    }

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
