//! How far a journal's wall-clock anchor can be trusted: the host clock's state recorded in the
//! header ([`ClockState`]), and, in a merged journal, one [`SourceInfo`] per input saying how it was
//! put on the merged clock and with what uncertainty.
//!
//! Each journal stamps events with a monotonic offset from its start and records one wall-clock
//! anchor; journals are joined by their anchors. On one host every anchor is read from the same
//! kernel clock, so two journals line up to within the time it takes to read it twice (kept at a
//! stated ±2 ms). Across hosts they line up only as well as the two clocks agree: the kernel's NTP
//! state (adjtimex) says how well that is, when the host is synchronised at all.

use serde::{Deserialize, Serialize};

/// Two anchors read from one kernel clock agree to within this (stated, not measured per run).
pub const ONE_HOST_S: f64 = 0.002;

/// The host clock when a journal's anchor was read.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockState {
    /// The kernel's boot id: two journals with the same one read the same clock (containers on one
    /// kernel included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The kernel's clocksource (tsc, hpet, kvm-clock ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Whether NTP (or PTP, chrony ...) keeps the clock synchronised, by the kernel's word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced: Option<bool>,
    /// The kernel's estimated error of the wall clock, in seconds (adjtimex `esterror`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_error_s: Option<f64>,
    /// The kernel's maximum error bound, in seconds (adjtimex `maxerror`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_s: Option<f64>,
}

impl ClockState {
    /// Reads what this host exposes; anything it does not is left None, never guessed.
    pub fn read() -> Self {
        let text = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let mut state = Self {
            boot_id: text("/proc/sys/kernel/random/boot_id"),
            source: text("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            ..Self::default()
        };
        // SAFETY: adjtimex with modes = 0 only reads the kernel's state into the zeroed struct.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::adjtimex(&mut tx) };
        if rc >= 0 {
            state.synced = Some(tx.status & libc::STA_UNSYNC == 0 && rc != libc::TIME_ERROR);
            state.est_error_s = Some(tx.esterror as f64 / 1e6);
            state.max_error_s = Some(tx.maxerror as f64 / 1e6);
        }
        state
    }
}

/// One input of a merged journal.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SourceInfo {
    /// The `origin` its records carry.
    pub index: u16,
    /// A short name for it in reports: the file's name.
    pub label: String,
    /// "journal" (wrap, load, soak) or "k6" (k6 JSON output).
    pub kind: String,
    /// The journal's mode, or "k6".
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Its wall-clock anchor, RFC 3339.
    pub started_at: String,
    /// Seconds added to its own `t_s` to put it on the merged clock (anchor difference plus any
    /// --clock-offset).
    pub shift_s: f64,
    /// The correction the user gave with --clock-offset, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_offset_s: Option<f64>,
    /// It supervised the server (wrap, or load/soak with a command): its lifecycle events are the
    /// server's own; an attached source's duplicates of them are dropped.
    pub supervises: bool,
    /// How its clock relates to the reference source's, in words.
    pub clock: String,
    /// The uncertainty of that relation in seconds; None when it is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty_s: Option<f64>,
    /// What a correlation between this source and the reference says about it: "within ±2 ms on
    /// one host", "within the stated skew (±40 ms, NTP)", "skew unknown ...".
    pub correlation: String,
}

/// What two sources' clocks have in common, from what their headers recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Relation {
    pub clock: String,
    pub uncertainty_s: Option<f64>,
    pub correlation: String,
}

/// How a source's clock relates to the reference's. `user_offset_s` is a --clock-offset correction.
pub fn relate(
    reference: (&str, Option<&ClockState>),
    this: (&str, Option<&ClockState>),
    user_offset_s: Option<f64>,
) -> Relation {
    let (ref_host, ref_clock) = reference;
    let (host, clock) = this;
    let one = format!("±{} ms", (ONE_HOST_S * 1e3).round());
    let same_boot = match (
        ref_clock.and_then(|c| c.boot_id.as_ref()),
        clock.and_then(|c| c.boot_id.as_ref()),
    ) {
        (Some(a), Some(b)) => Some(a == b),
        _ => None,
    };
    if let Some(d) = user_offset_s {
        return Relation {
            clock: format!(
                "corrected by --clock-offset {}: trusted as given",
                signed_secs(d)
            ),
            uncertainty_s: None,
            correlation: format!(
                "within the error of the --clock-offset {} you gave",
                signed_secs(d)
            ),
        };
    }
    // One kernel (same boot id), or, for journals that predate the boot id, the same host name.
    if same_boot == Some(true) || (same_boot.is_none() && host == ref_host) {
        let how = if same_boot == Some(true) {
            "the same kernel clock (same boot id)"
        } else {
            "the same host name (no boot id recorded)"
        };
        return Relation {
            clock: format!("one host with {ref_host}: {how}; anchors agree within {one}"),
            uncertainty_s: Some(ONE_HOST_S),
            correlation: format!("within {one} on one host"),
        };
    }
    let synced =
        |c: Option<&ClockState>| c.and_then(|c| c.synced.filter(|s| *s).and(c.est_error_s));
    match (synced(ref_clock), synced(clock)) {
        (Some(a), Some(b)) => {
            let skew = a + b + ONE_HOST_S;
            let ms = format!("±{:.0} ms", (skew * 1e3).max(1.0));
            Relation {
                clock: format!(
                    "{host} and {ref_host} are different hosts, both NTP-synchronised: assumed skew {ms} (the kernels' estimated errors); correct with --clock-offset"
                ),
                uncertainty_s: Some(skew),
                correlation: format!("within the stated skew ({ms}, NTP estimate)"),
            }
        }
        _ => Relation {
            clock: format!(
                "{host} and {ref_host} are different hosts and at least one clock is not known to be synchronised: skew unknown; measure it and pass --clock-offset FILE=±D"
            ),
            uncertainty_s: None,
            correlation: format!("skew between {host} and {ref_host} unknown"),
        },
    }
}

/// "+1.5s", "-250ms".
pub fn signed_secs(s: f64) -> String {
    let sign = if s < 0.0 { "-" } else { "+" };
    format!("{sign}{}", super::secs(s.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(boot: &str, synced: bool, est: f64) -> ClockState {
        ClockState {
            boot_id: Some(boot.into()),
            source: Some("tsc".into()),
            synced: Some(synced),
            est_error_s: Some(est),
            max_error_s: Some(est * 10.0),
        }
    }

    #[test]
    fn one_kernel_is_one_clock_whatever_the_host_names_say() {
        let a = clock("b1", false, 0.0);
        let r = relate(("web", Some(&a)), ("k6-box", Some(&a)), None);
        assert_eq!(r.uncertainty_s, Some(ONE_HOST_S));
        assert_eq!(r.correlation, "within ±2 ms on one host");
    }

    #[test]
    fn two_synchronised_hosts_state_the_skew_the_kernels_estimate() {
        let a = clock("b1", true, 0.010);
        let b = clock("b2", true, 0.020);
        let r = relate(("web", Some(&a)), ("gen", Some(&b)), None);
        assert!((r.uncertainty_s.unwrap() - 0.032).abs() < 1e-9);
        assert!(r.correlation.contains("±32 ms"), "{}", r.correlation);
        assert!(r.clock.contains("--clock-offset"), "{}", r.clock);
    }

    #[test]
    fn an_unsynchronised_or_unrecorded_clock_is_unknown_skew_not_zero() {
        let a = clock("b1", true, 0.010);
        let b = clock("b2", false, 0.010);
        let r = relate(("web", Some(&a)), ("gen", Some(&b)), None);
        assert_eq!(r.uncertainty_s, None);
        assert!(r.correlation.contains("unknown"));
        let r = relate(("web", None), ("gen", None), None);
        assert_eq!(r.uncertainty_s, None);
        // No boot id recorded (an old journal): the same host name is one host.
        let r = relate(("web", None), ("web", None), None);
        assert_eq!(r.uncertainty_s, Some(ONE_HOST_S));
    }

    #[test]
    fn a_user_offset_is_named_as_the_users() {
        let r = relate(("web", None), ("gen", None), Some(-0.25));
        assert!(r.correlation.contains("-250ms"), "{}", r.correlation);
    }

    #[test]
    fn this_host_reads_its_own_clock_state() {
        let c = ClockState::read();
        assert!(c.boot_id.is_some(), "{c:?}");
    }
}
