//! Name resolution, read from the journal: each host name witness resolved, how long the lookup
//! took (once, before the first probe; never inside a latency, the connect floor or a health
//! timeout), and, when it was slow, why in the resolver's own terms: a lookup that took a multiple of
//! the resolver's timeout (/etc/resolv.conf's `options timeout:N`, glibc's 5 s by default) is that
//! many nameservers not answering, first one first.

use serde::Serialize;

use crate::journal::{Event, Record, ResolverConf};

/// A lookup this slow is named: no working resolver takes half a second (a local one answers in
/// microseconds, a remote one in milliseconds), and glibc's smallest timeout is 1 s.
pub const SLOW_S: f64 = 0.5;

/// glibc's resolver timeout when resolv.conf sets none.
const GLIBC_TIMEOUT_S: f64 = 5.0;

/// One host name, as the run resolved it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resolved {
    pub host: String,
    pub addrs: Vec<String>,
    /// The first lookup's duration: the one the run began with.
    pub took_s: f64,
    /// How many times it was looked up again (every address had stopped answering).
    pub again: u32,
    /// The slow lookups (the first or a later one), each said once with its figure and cause.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slow: Vec<String>,
    /// The last lookup failed: the resolver's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The run's host names in the order they were first resolved.
pub fn rows(recs: &[Record]) -> Vec<Resolved> {
    let mut rows: Vec<Resolved> = Vec::new();
    for r in recs {
        let Event::Resolved {
            host,
            addrs,
            took_s,
            again,
            error,
            resolver,
        } = &r.event
        else {
            continue;
        };
        let slow = slow_words(host, *took_s, resolver);
        match rows.iter_mut().find(|x| x.host == *host) {
            Some(row) => {
                row.again += u32::from(again.is_some());
                if !addrs.is_empty() {
                    row.addrs = addrs.clone();
                }
                row.error = error.clone();
                row.slow.extend(slow.map(|s| format!("again: {s}")));
            }
            None => rows.push(Resolved {
                host: host.clone(),
                addrs: addrs.clone(),
                took_s: *took_s,
                again: u32::from(again.is_some()),
                slow: slow.into_iter().collect(),
                error: error.clone(),
            }),
        }
    }
    rows
}

/// A duration as this module says it: "2.0 s", "3.1 ms".
pub fn figure(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.1} s")
    } else if s >= 0.001 {
        format!("{:.1} ms", s * 1000.0)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// The report's line for a name: "resolution: app.test → 127.0.0.1 in 2.0 s (once, not in any
/// latency)".
pub fn line(r: &Resolved) -> String {
    let again = match r.again {
        0 => "once".to_string(),
        n => format!(
            "then {n} more time{} after every address stopped answering",
            if n == 1 { "" } else { "s" }
        ),
    };
    let to = match (&r.error, r.addrs.is_empty()) {
        (Some(e), true) => format!("no address ({e})"),
        _ => r.addrs.join(", "),
    };
    format!(
        "resolution: {} → {to} in {} ({again}, not in any latency)",
        r.host,
        figure(r.took_s)
    )
}

/// A lookup of at least [`SLOW_S`]: its figure and its likely cause, e.g. "resolving app.test took
/// 5.0 s: the first nameserver in /etc/resolv.conf (10.0.0.9) did not answer (the resolver's 5 s
/// timeout, glibc's default)". None for a quick one.
pub fn slow_words(host: &str, took_s: f64, c: &ResolverConf) -> Option<String> {
    (took_s >= SLOW_S).then(|| {
        format!(
            "resolving {host} took {}: {}",
            figure(took_s),
            cause(took_s, c)
        )
    })
}

/// Why a lookup took `took_s`, from what the resolver was told.
pub fn cause(took_s: f64, c: &ResolverConf) -> String {
    let t = c.timeout_s.filter(|t| *t > 0.0).unwrap_or(GLIBC_TIMEOUT_S);
    let whose = match c.timeout_s {
        Some(_) => format!(
            "the resolver's {} timeout, options timeout:{t} in /etc/resolv.conf",
            secs(t)
        ),
        None => format!("the resolver's {} timeout, glibc's default", secs(t)),
    };
    // The time sits at k timeouts (plus the answer's own, well under one).
    let k = (took_s / t).floor();
    let at_timeout = k >= 1.0 && took_s - k * t <= (0.3 * t).max(0.3);
    let ns = &c.nameservers;
    let k = k as usize;
    if c.in_hosts {
        return "/etc/hosts names it, so the time went to what /etc/nsswitch.conf asks before the hosts file".into();
    }
    if !at_timeout {
        return match ns.is_empty() {
            true => "no nameserver is set in /etc/resolv.conf, and no resolver timeout explains it".into(),
            false => format!(
                "the nameservers in /etc/resolv.conf ({}) answered slowly; no resolver timeout explains it",
                ns.join(", ")
            ),
        };
    }
    match k {
        1 if ns.len() > 1 => format!(
            "the first nameserver in /etc/resolv.conf ({}) did not answer ({whose})",
            ns[0]
        ),
        k if k < ns.len() => format!(
            "the first {k} nameservers in /etc/resolv.conf ({}) did not answer ({k} × {whose})",
            ns[..k].join(", ")
        ),
        1 => format!(
            "the nameserver in /etc/resolv.conf ({}) did not answer at first ({whose})",
            ns.first().map_or("none set", String::as_str)
        ),
        k => format!(
            "the nameservers in /etc/resolv.conf ({}) did not answer {k} times ({k} × {whose})",
            if ns.is_empty() {
                "none set".to_string()
            } else {
                ns.join(", ")
            }
        ),
    }
}

/// Why a lookup that gave no address at all took `took_s`: the nameservers that did not answer,
/// with the resolver's timeout, when the time sits at a multiple of it.
pub fn unanswered_cause(took_s: f64, c: &ResolverConf) -> String {
    let ns = match c.nameservers.is_empty() {
        true => "no nameserver is set in /etc/resolv.conf".to_string(),
        false => format!(
            "no nameserver in /etc/resolv.conf answered ({})",
            c.nameservers.join(", ")
        ),
    };
    let t = c.timeout_s.filter(|t| *t > 0.0).unwrap_or(GLIBC_TIMEOUT_S);
    let k = (took_s / t).floor();
    if k >= 1.0 && took_s - k * t <= (0.3 * t).max(0.3) {
        let whose = match c.timeout_s {
            Some(_) => format!("options timeout:{t} in /etc/resolv.conf"),
            None => "glibc's default".into(),
        };
        let times = match k as u32 {
            1 => String::new(),
            k => format!("{k} × "),
        };
        format!("{ns}: {times}the resolver's {} timeout ({whose})", secs(t))
    } else {
        ns
    }
}

/// A timeout as resolv.conf sets it: whole seconds.
fn secs(t: f64) -> String {
    if t.fract() == 0.0 {
        format!("{t:.0} s")
    } else {
        format!("{t} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Record;

    fn conf(ns: &[&str], timeout: Option<f64>) -> ResolverConf {
        ResolverConf {
            nameservers: ns.iter().map(|s| s.to_string()).collect(),
            timeout_s: timeout,
            attempts: None,
            in_hosts: false,
        }
    }

    fn resolved(t_s: f64, took_s: f64, again: bool, c: &ResolverConf) -> Record {
        Record {
            t_s,
            origin: None,
            event: Event::Resolved {
                host: "app.test".into(),
                addrs: vec!["127.0.0.1".into()],
                took_s,
                again: again.then(|| "every address stopped answering".into()),
                error: None,
                resolver: c.clone(),
            },
        }
    }

    #[test]
    fn a_dead_first_nameserver_is_named_at_glibc_s_default_timeout() {
        let c = conf(&["10.0.0.9", "127.0.0.1"], None);
        let w = slow_words("app.test", 5.004, &c).unwrap();
        assert_eq!(
            w,
            "resolving app.test took 5.0 s: the first nameserver in /etc/resolv.conf (10.0.0.9) did not answer (the resolver's 5 s timeout, glibc's default)"
        );
    }

    #[test]
    fn the_timeout_resolv_conf_sets_is_the_one_named() {
        let c = conf(&["127.53.0.1", "127.53.0.9", "127.53.0.2"], Some(1.0));
        let one = slow_words("app.test", 1.02, &c).unwrap();
        assert!(one.contains("took 1.0 s"), "{one}");
        assert!(one.contains("the first nameserver in /etc/resolv.conf (127.53.0.1) did not answer (the resolver's 1 s timeout, options timeout:1 in /etc/resolv.conf)"), "{one}");
        let two = cause(2.05, &c);
        assert!(two.contains("the first 2 nameservers in /etc/resolv.conf (127.53.0.1, 127.53.0.9) did not answer (2 × the resolver's 1 s timeout"), "{two}");
    }

    #[test]
    fn a_slow_lookup_off_any_timeout_is_not_pinned_on_one() {
        let c = conf(&["10.0.0.9"], Some(2.0));
        let w = cause(0.8, &c);
        assert!(
            w.contains("answered slowly; no resolver timeout explains it"),
            "{w}"
        );
        assert!(!w.contains("did not answer"), "{w}");
    }

    #[test]
    fn a_resolver_that_never_answered_names_its_nameservers_and_timeouts() {
        let c = conf(&["127.53.0.1", "127.53.0.9"], Some(1.0));
        assert_eq!(
            unanswered_cause(2.01, &c),
            "no nameserver in /etc/resolv.conf answered (127.53.0.1, 127.53.0.9): 2 × the resolver's 1 s timeout (options timeout:1 in /etc/resolv.conf)"
        );
    }

    #[test]
    fn a_lone_dead_nameserver_is_one_timeout() {
        let c = conf(&["127.53.0.1"], None);
        assert_eq!(
            unanswered_cause(10.02, &c),
            "no nameserver in /etc/resolv.conf answered (127.53.0.1): 2 × the resolver's 5 s timeout (glibc's default)"
        );
        assert!(
            unanswered_cause(5.01, &c).ends_with(": the resolver's 5 s timeout (glibc's default)")
        );
    }

    #[test]
    fn a_quick_lookup_is_not_named() {
        assert_eq!(
            slow_words("app.test", 0.002, &conf(&["10.0.0.9"], None)),
            None
        );
        assert_eq!(
            slow_words("app.test", SLOW_S - 0.01, &conf(&[], None)),
            None
        );
    }

    #[test]
    fn one_row_per_name_with_its_first_lookup_and_the_slow_ones_after() {
        let c = conf(&["10.0.0.9", "127.0.0.1"], Some(2.0));
        let rows = rows(&[
            resolved(0.0, 0.001, false, &c),
            resolved(30.0, 2.01, true, &c),
            resolved(45.0, 0.001, true, &c),
        ]);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.took_s, 0.001);
        assert_eq!(r.again, 2);
        assert_eq!(r.slow.len(), 1, "{r:?}");
        assert!(
            r.slow[0].starts_with("again: resolving app.test took 2.0 s"),
            "{r:?}"
        );
        assert_eq!(
            line(r),
            "resolution: app.test → 127.0.0.1 in 1.0 ms (then 2 more times after every address stopped answering, not in any latency)"
        );
    }
}
