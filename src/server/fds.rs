//! witness's own file-descriptor budget. Every connection the ladder opens is one of witness's file
//! descriptors; a soft limit below what the ladder needs turns witness's own "Too many open files"
//! into what looks like the server's failures. So before anything runs the soft limit is raised to
//! what the ladder needs (up to the hard limit), or the run is refused with the numbers. The server
//! witness starts gets the user's original limit back, so raising witness's never changes the
//! server's environment.

use std::sync::OnceLock;

/// witness's soft and hard limits as it found them, set when it raised the soft limit.
static ORIGINAL: OnceLock<libc::rlimit> = OnceLock::new();

/// Descriptors witness needs for `max_concurrency` workers: each level's connections, the previous
/// level's pool while it closes, and room for the journal, pipes, probes and /proc reads.
pub fn needed(max_concurrency: u32) -> u64 {
    2 * max_concurrency as u64 + 64
}

fn current() -> std::io::Result<libc::rlimit> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(l)
}

/// Makes sure witness may open `need` descriptors: raises the soft limit (up to the hard limit) or
/// says why it cannot, with the numbers and the fix. Returns the soft limit in force.
pub fn ensure(need: u64, what: &str) -> Result<u64, String> {
    let l = current().map_err(|e| format!("could not read witness's open-file limit: {e}"))?;
    if l.rlim_cur >= need {
        return Ok(l.rlim_cur);
    }
    if l.rlim_max < need {
        return Err(format!(
            "{what} needs about {need} open files, but witness's limit is {} (soft) / {} (hard): its own \"Too many open files\" would look like the server's errors. Raise the limit (ulimit -n {need}) or lower the concurrency",
            l.rlim_cur, l.rlim_max
        ));
    }
    let raised = libc::rlimit {
        rlim_cur: need,
        rlim_max: l.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(format!(
            "{what} needs about {need} open files; witness's soft limit is {} and raising it to {need} failed: {}",
            l.rlim_cur,
            std::io::Error::last_os_error()
        ));
    }
    let _ = ORIGINAL.set(l);
    Ok(need)
}

/// The limits to give back to a child witness starts, if witness raised its own.
pub fn original() -> Option<libc::rlimit> {
    ORIGINAL.get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_need_grows_with_the_ladder() {
        assert!(needed(1000) > 1000);
        assert!(needed(1) >= 64);
    }

    #[test]
    fn a_need_within_the_soft_limit_changes_nothing() {
        let l = current().unwrap();
        assert_eq!(ensure(1, "test"), Ok(l.rlim_cur));
        let too_many = l.rlim_max.saturating_add(1);
        if l.rlim_max != libc::RLIM_INFINITY {
            let e = ensure(too_many, "--levels 9").unwrap_err();
            assert!(e.contains("(hard)"), "{e}");
            assert!(e.contains("--levels 9 needs about"), "{e}");
        }
    }
}
