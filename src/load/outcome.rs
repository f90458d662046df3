//! Classifying a response: ok for 1xx/2xx and for any status the user accepts (`--accept-status`); an
//! unexpected 3xx is an error (redirects are not followed, so a server redirecting every call to a
//! login page must not pass); a capacity refusal (429, 503, or a body naming QUEUE_FULL —
//! configurable) is `rejected`, correct behaviour counted apart; any other 4xx/5xx is an HTTP error
//! with its status kept.

use crate::journal::{ErrorKind, Outcome};

/// What counts as a capacity refusal.
#[derive(Clone, Debug)]
pub struct Rejection {
    pub statuses: Vec<u16>,
    /// A body containing this marks a refusal whatever the status.
    pub body_marker: Option<String>,
    /// Statuses the user declared fine (`--accept-status 301,302`): counted ok.
    pub accepted: Vec<u16>,
}

impl Default for Rejection {
    fn default() -> Self {
        Self {
            statuses: vec![429, 503],
            body_marker: Some("QUEUE_FULL".into()),
            accepted: Vec::new(),
        }
    }
}

/// Only this much of a body is searched for the refusal marker.
const SCAN: usize = 64 * 1024;

pub fn classify_response(status: u16, body: &[u8], rej: &Rejection) -> Outcome {
    if rej.statuses.contains(&status) {
        return Outcome::Rejected {
            status: Some(status),
            reason: format!("HTTP {status}"),
        };
    }
    if let Some(m) = &rej.body_marker {
        let head = &body[..body.len().min(SCAN)];
        if !m.is_empty() && head.windows(m.len()).any(|w| w == m.as_bytes()) {
            return Outcome::Rejected {
                status: Some(status),
                reason: format!("body names {m}"),
            };
        }
    }
    if rej.accepted.contains(&status) {
        return Outcome::Ok;
    }
    match status {
        s if s < 300 => Outcome::Ok,
        s if s < 400 => Outcome::Error {
            error: ErrorKind::Http3xx,
            status: Some(s),
        },
        s if s < 500 => Outcome::Error {
            error: ErrorKind::Http4xx,
            status: Some(s),
        },
        s => Outcome::Error {
            error: ErrorKind::Http5xx,
            status: Some(s),
        },
    }
}

/// The most of an error body kept in the journal and shown in annotations.
pub const BODY_START: usize = 120;

/// "HTTP 503 'too many connections'": the status and the start of an error answer's body, bounded,
/// on one line, with anything that looks like a credential (`Bearer …`, `token=…`) masked.
pub fn body_start(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(BODY_START * 4)]);
    let flat: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let masked = mask_credentials(&flat);
    if masked.is_empty() {
        return format!("HTTP {status} (empty body)");
    }
    let mut start: String = masked.chars().take(BODY_START).collect();
    if masked.chars().count() > BODY_START {
        start.push('…');
    }
    format!("HTTP {status} '{start}'")
}

/// Masks the value after `bearer`, `token`, `secret`, `password`, `api_key` (case-insensitive).
fn mask_credentials(s: &str) -> String {
    static CRED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"(?i)(bearer\s+|basic\s+|(?:token|secret|password|passwd|api[_-]?key|authorization)"?\s*[:=]\s*"?)[^\s",;}]+"#,
        )
        .expect("a valid pattern")
    });
    CRED.replace_all(s, "${1}***").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_bounded_on_one_line_and_masks_credentials() {
        assert_eq!(
            body_start(503, b"too many\nconnections\r\n"),
            "HTTP 503 'too many connections'"
        );
        assert_eq!(body_start(500, b""), "HTTP 500 (empty body)");
        let long = "x".repeat(1000);
        let s = body_start(500, long.as_bytes());
        assert!(s.ends_with("…'") && s.len() < 140, "{s}");
        let s = body_start(
            401,
            br#"{"error":"bad token","token":"abcd1234","auth":"Bearer sk-999"}"#,
        );
        assert!(!s.contains("abcd1234") && !s.contains("sk-999"), "{s}");
        assert!(s.contains("bad token"), "{s}");
    }

    #[test]
    fn capacity_refusals_are_rejected_not_errors() {
        let r = Rejection::default();
        assert_eq!(classify_response(429, b"", &r).label(), "rejected");
        assert_eq!(classify_response(503, b"", &r).label(), "rejected");
        assert_eq!(
            classify_response(500, br#"{"error":"QUEUE_FULL"}"#, &r).label(),
            "rejected"
        );
        assert_eq!(classify_response(200, b"ok", &r), Outcome::Ok);
        assert_eq!(
            classify_response(502, b"bad gateway", &r),
            Outcome::Error {
                error: ErrorKind::Http5xx,
                status: Some(502)
            }
        );
        assert_eq!(classify_response(404, b"", &r).label(), "error");
    }

    #[test]
    fn each_status_class_has_its_own_kind_at_its_boundaries() {
        let r = Rejection::default();
        let kind = |s: u16| match classify_response(s, b"", &r) {
            Outcome::Ok => "ok",
            Outcome::Error {
                error: ErrorKind::Http3xx,
                status: Some(x),
            } if x == s => "3xx",
            Outcome::Error {
                error: ErrorKind::Http4xx,
                status: Some(x),
            } if x == s => "4xx",
            Outcome::Error {
                error: ErrorKind::Http5xx,
                status: Some(x),
            } if x == s => "5xx",
            o => panic!("{s}: {o:?}"),
        };
        let got: Vec<(u16, &str)> = [100, 200, 299, 300, 399, 400, 404, 499, 500, 502, 599]
            .into_iter()
            .map(|s| (s, kind(s)))
            .collect();
        assert_eq!(
            got,
            [
                (100, "ok"),
                (200, "ok"),
                (299, "ok"),
                (300, "3xx"),
                (399, "3xx"),
                (400, "4xx"),
                (404, "4xx"),
                (499, "4xx"),
                (500, "5xx"),
                (502, "5xx"),
                (599, "5xx"),
            ]
        );
    }

    #[test]
    fn the_refusal_marker_is_looked_for_in_the_first_64_kib_only() {
        let r = Rejection::default();
        let at = |offset: usize| {
            let mut body = vec![b'.'; offset];
            body.extend_from_slice(b"QUEUE_FULL");
            classify_response(500, &body, &r).label()
        };
        assert_eq!(at(2_000), "rejected");
        assert_eq!(at(64 * 1024 - 10), "rejected");
        assert_eq!(at(64 * 1024), "error", "past the scan");
        // An empty marker marks nothing (and never panics looking for it).
        let r = Rejection {
            body_marker: Some(String::new()),
            ..Rejection::default()
        };
        assert_eq!(classify_response(500, b"anything", &r).label(), "error");
    }

    #[test]
    fn the_body_kept_is_read_from_its_first_480_bytes_and_cut_at_120_characters() {
        // Leading whitespace collapses: a reason after 300 spaces is still read.
        let body = format!("{}the reason", " ".repeat(300));
        assert_eq!(body_start(500, body.as_bytes()), "HTTP 500 'the reason'");
        // Past the 480 bytes read, it is not.
        let body = format!("{}the reason", " ".repeat(480));
        assert_eq!(body_start(500, body.as_bytes()), "HTTP 500 (empty body)");
        // Exactly 120 characters are kept whole; one more is cut with an ellipsis.
        let exact = "y".repeat(BODY_START);
        assert_eq!(
            body_start(500, exact.as_bytes()),
            format!("HTTP 500 '{exact}'")
        );
        let over = "y".repeat(BODY_START + 1);
        assert_eq!(
            body_start(500, over.as_bytes()),
            format!("HTTP 500 '{exact}…'")
        );
    }

    #[test]
    fn the_refusal_rules_are_configurable() {
        let r = Rejection {
            statuses: vec![],
            body_marker: None,
            accepted: vec![],
        };
        assert_eq!(classify_response(429, b"", &r).label(), "error");
    }

    #[test]
    fn a_redirect_is_an_error_unless_accepted() {
        let r = Rejection::default();
        assert_eq!(
            classify_response(302, b"", &r),
            Outcome::Error {
                error: ErrorKind::Http3xx,
                status: Some(302)
            }
        );
        let r = Rejection {
            accepted: vec![301, 302],
            ..Rejection::default()
        };
        assert_eq!(classify_response(302, b"", &r), Outcome::Ok);
        assert_eq!(classify_response(303, b"", &r).label(), "error");
    }
}
