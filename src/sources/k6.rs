//! k6's JSON output (`k6 run --out json=results.json`, also gzipped) read as a load source, line by
//! line: each `http_req_duration` sample becomes one `Request` with one outcome by witness's own rules
//! (ok below 400; 429/503 rejected; other 4xx/5xx errors; k6's request timeout a timeout; a refused
//! or reset connection the same error kind witness's client names), grouped by the k6 scenario.
//!
//! k6 stamps every sample of one request with the request's end time and the same tags, so the
//! request's start is that time less `http_req_duration`. Whether k6 counted it failed comes from the
//! `expected_response` tag on the duration sample, or else from the `http_req_failed` sample that
//! follows it; only a small window of requests waits for that pairing, so memory stays bounded
//! however large the file.

use std::collections::VecDeque;
use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

use crate::journal::{micros, ErrorKind, Event, Outcome, Record, TimeoutPhase};
use crate::load::outcome::{classify_response, Rejection};

/// Requests waiting for their `http_req_failed` sample; past this, the oldest is decided by its status.
const PAIRING_WINDOW: usize = 1024;

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    metric: String,
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    /// Absent on the "Metric" lines that declare a metric.
    #[serde(default)]
    time: String,
    #[serde(default)]
    value: f64,
    #[serde(default)]
    tags: serde_json::Map<String, serde_json::Value>,
}

/// One request as read, before witness gives it an id and a clock.
#[derive(Clone, Debug, PartialEq)]
pub struct K6Request {
    pub end_unix_s: f64,
    pub duration_s: f64,
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub scenario: String,
    pub vu: u32,
    pub detail: String,
}

struct Pending {
    key: (String, String),
    end_unix_s: f64,
    duration_s: f64,
    tags: serde_json::Map<String, serde_json::Value>,
}

pub struct K6Stream {
    input: Box<dyn BufRead + Send>,
    lineno: u64,
    buf: Vec<u8>,
    pending: VecDeque<Pending>,
    ready: VecDeque<K6Request>,
    done: bool,
    /// Wall-clock start of the first request: this source's anchor.
    pub anchor_unix_s: f64,
    pub started_at: String,
    pub truncated: Option<String>,
    pub skipped: Vec<String>,
    pub skipped_count: u64,
    pub error: Option<String>,
}

impl K6Stream {
    /// Opens the file and reads up to its first request, whose start becomes the anchor.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let input = super::open_maybe_gz(path)
            .with_context(|| format!("opening the k6 results {} (--k6)", path.display()))?;
        let mut s = Self {
            input,
            lineno: 0,
            buf: Vec::new(),
            pending: VecDeque::new(),
            ready: VecDeque::new(),
            done: false,
            anchor_unix_s: 0.0,
            started_at: String::new(),
            truncated: None,
            skipped: Vec::new(),
            skipped_count: 0,
            error: None,
        };
        s.fill();
        let Some(first) = s.ready.front() else {
            let why = s
                .error
                .clone()
                .or_else(|| s.skipped.first().cloned())
                .unwrap_or_else(|| "no http_req_duration sample".into());
            anyhow::bail!(
                "{}: no HTTP request found in it ({why}); --k6 takes the file `k6 run --out json=FILE` writes",
                path.display()
            );
        };
        s.anchor_unix_s = first.end_unix_s - first.duration_s;
        s.started_at = rfc3339(s.anchor_unix_s);
        Ok(s)
    }

    /// Reads lines until a request is ready or the file ends.
    fn fill(&mut self) {
        while self.ready.is_empty() && !self.done {
            self.buf.clear();
            let n = match self.input.read_until(b'\n', &mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    self.error = Some(format!("read error after line {}: {e}", self.lineno));
                    0
                }
            };
            if n == 0 {
                self.done = true;
                while let Some(p) = self.pending.pop_front() {
                    self.ready.push_back(request(p, None));
                }
                break;
            }
            self.lineno += 1;
            let complete = self.buf.last() == Some(&b'\n');
            // Most lines are other metrics: skip them without parsing.
            let wanted = memchr::memmem::find(&self.buf, b"\"http_req_duration\"").is_some()
                || (!self.pending.is_empty()
                    && memchr::memmem::find(&self.buf, b"\"http_req_failed\"").is_some());
            if !wanted {
                continue;
            }
            let line: Line = match serde_json::from_slice(&self.buf) {
                Ok(l) => l,
                Err(_) if !complete => {
                    self.truncated = Some(format!(
                        "line {} was cut off mid-write; k6 was probably stopped",
                        self.lineno
                    ));
                    continue;
                }
                Err(e) => {
                    self.skip(format!("line {}: {e}", self.lineno));
                    continue;
                }
            };
            if line.kind != "Point" {
                continue;
            }
            let Some(end) = parse_rfc3339(&line.data.time) else {
                self.skip(format!(
                    "line {}: time {:?} is not RFC 3339",
                    self.lineno, line.data.time
                ));
                continue;
            };
            // The samples of one request share its time and tags: that pairs them, when needed.
            let key = |d: &Data| {
                (
                    d.time.clone(),
                    serde_json::to_string(&d.tags).unwrap_or_default(),
                )
            };
            match line.metric.as_str() {
                "http_req_duration" => {
                    let paired = line.data.tags.contains_key("expected_response");
                    let p = Pending {
                        key: if paired {
                            Default::default()
                        } else {
                            key(&line.data)
                        },
                        end_unix_s: end,
                        duration_s: line.data.value / 1e3,
                        tags: line.data.tags,
                    };
                    match p.tags.get("expected_response").and_then(|v| v.as_str()) {
                        Some(e) => {
                            let failed = e == "false";
                            self.ready.push_back(request(p, Some(failed)));
                        }
                        None => {
                            self.pending.push_back(p);
                            if self.pending.len() > PAIRING_WINDOW {
                                let p = self.pending.pop_front().expect("not empty");
                                self.ready.push_back(request(p, None));
                            }
                        }
                    }
                }
                "http_req_failed" if !self.pending.is_empty() => {
                    let key = key(&line.data);
                    if let Some(i) = self.pending.iter().rposition(|p| p.key == key) {
                        let p = self.pending.remove(i).expect("found");
                        self.ready
                            .push_back(request(p, Some(line.data.value != 0.0)));
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether it ended early (cut off, or a read error), not merely with unreadable lines.
    pub fn ended_early(&self) -> bool {
        self.truncated.is_some() || self.error.is_some()
    }

    fn skip(&mut self, what: String) {
        self.skipped_count += 1;
        if self.skipped.len() < 5 {
            self.skipped.push(what);
        }
    }

    /// The next request in file order.
    pub fn next_request(&mut self) -> Option<K6Request> {
        self.fill();
        self.ready.pop_front()
    }

    /// The next request as a journal record on this source's own clock (`id` is set by the merge).
    pub fn next_record(&mut self) -> Option<Record> {
        let r = self.next_request()?;
        let t = micros(r.end_unix_s - self.anchor_unix_s);
        Some(Record {
            t_s: t,
            event: Event::Request {
                id: 0,
                group: r.scenario,
                worker: r.vu,
                start_s: micros(t - r.duration_s),
                duration_s: micros(r.duration_s),
                outcome: r.outcome,
                status: r.status,
                scheduled_s: None,
                detail: Some(r.detail),
                body_bytes: None,
                body_cut: false,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
                rpc_id: None,
            },
            origin: None,
        })
    }
}

fn tag<'a>(tags: &'a serde_json::Map<String, serde_json::Value>, name: &str) -> Option<&'a str> {
    tags.get(name)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
}

fn request(p: Pending, failed: Option<bool>) -> K6Request {
    let status = tag(&p.tags, "status")
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| *s != 0);
    let code = tag(&p.tags, "error_code").and_then(|s| s.parse::<u32>().ok());
    let error = tag(&p.tags, "error");
    let outcome = outcome_of(status, code, error, failed, p.duration_s);
    let method = tag(&p.tags, "method").unwrap_or("?");
    // The path only: a query string may carry a token, and the journal keeps no secret.
    let url = tag(&p.tags, "name").or(tag(&p.tags, "url")).unwrap_or("?");
    let url = url.split(['?', '#']).next().unwrap_or(url);
    let mut detail = format!("k6 {method} {url}");
    if let Some(e) = error {
        detail.push_str(&format!(": {e}"));
        if let Some(c) = code {
            detail.push_str(&format!(" (k6 error {c})"));
        }
    }
    K6Request {
        end_unix_s: p.end_unix_s,
        duration_s: p.duration_s,
        outcome,
        status,
        scenario: tag(&p.tags, "scenario").unwrap_or("default").to_string(),
        vu: tag(&p.tags, "vu").and_then(|v| v.parse().ok()).unwrap_or(0),
        detail,
    }
}

/// One outcome by witness's rules. `failed` is k6's own judgement (its response callback), which
/// only matters where the status alone would say ok.
pub fn outcome_of(
    status: Option<u16>,
    error_code: Option<u32>,
    error: Option<&str>,
    failed: Option<bool>,
    duration_s: f64,
) -> Outcome {
    if let Some(s) = status {
        let o = classify_response(s, b"", &Rejection::default());
        if o.is_ok() && failed == Some(true) {
            return Outcome::Error {
                error: if (300..400).contains(&s) {
                    ErrorKind::Http3xx
                } else {
                    ErrorKind::Other
                },
                status: Some(s),
            };
        }
        return o;
    }
    let err = |error| Outcome::Error {
        error,
        status: None,
    };
    let text = error.unwrap_or("").to_ascii_lowercase();
    match error_code {
        // k6's own request timeout: the harness's limit, which is what witness calls a timeout.
        Some(1050) => Outcome::Timeout {
            phase: TimeoutPhase::Request,
            limit_s: micros(duration_s),
        },
        Some(1211) => Outcome::Timeout {
            phase: TimeoutPhase::Connect,
            limit_s: micros(duration_s),
        },
        Some(1212) => err(ErrorKind::ConnectRefused),
        Some(1220) | Some(1201) => err(ErrorKind::Reset),
        Some(1020) => err(ErrorKind::Local),
        Some(c) if (1100..1200).contains(&c) || (1200..1400).contains(&c) => {
            err(ErrorKind::Connect)
        }
        Some(c) if (1600..1700).contains(&c) => err(ErrorKind::Protocol),
        _ if text.contains("reset") => err(ErrorKind::Reset),
        _ if text.contains("eof") => err(ErrorKind::ClosedBeforeResponse),
        _ if text.contains("refused") => err(ErrorKind::ConnectRefused),
        _ => err(ErrorKind::Other),
    }
}

/// RFC 3339 with any fraction and a `Z` or `±HH:MM` offset, as k6 writes it, to Unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut frac = 0.0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
        }
        frac = format!("0.{}", s.get(start..i)?).parse().ok()?;
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        b'+' | b'-' if i + 6 == b.len() => {
            let sign = if b[i] == b'-' { -1 } else { 1 };
            sign * (num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60)
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some((days * 86400 + h * 3600 + mi * 60 + se - offset) as f64 + frac)
}

pub fn rfc3339(unix_s: f64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(unix_s.max(0.0));
    humantime::format_rfc3339_micros(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k6_times_read_with_any_offset() {
        let z = parse_rfc3339("2026-12-01T10:01:51.543095368Z").unwrap();
        assert!((z - 1796119311.543095).abs() < 1e-5, "{z}");
        let plus = parse_rfc3339("2026-12-01T12:01:51.543095368+02:00").unwrap();
        assert!((plus - z).abs() < 1e-6);
        assert!(parse_rfc3339("yesterday").is_none());
        assert!(parse_rfc3339("2026-13-01T10:01:51Z").is_none());
    }

    #[test]
    fn each_k6_request_gets_one_outcome_by_witness_rules() {
        assert_eq!(
            outcome_of(Some(200), None, None, Some(false), 0.1),
            Outcome::Ok
        );
        assert_eq!(
            outcome_of(Some(429), None, None, Some(true), 0.1).label(),
            "rejected"
        );
        assert_eq!(
            outcome_of(Some(503), None, None, Some(true), 0.1).label(),
            "rejected"
        );
        assert_eq!(
            outcome_of(Some(500), Some(1500), None, Some(true), 0.1),
            Outcome::Error {
                error: ErrorKind::Http5xx,
                status: Some(500)
            }
        );
        assert_eq!(
            outcome_of(None, Some(1050), Some("request timeout"), Some(true), 0.7),
            Outcome::Timeout {
                phase: TimeoutPhase::Request,
                limit_s: 0.7
            }
        );
        assert_eq!(
            outcome_of(
                None,
                Some(1212),
                Some("dial: connection refused"),
                None,
                0.0
            ),
            Outcome::Error {
                error: ErrorKind::ConnectRefused,
                status: None
            }
        );
        assert_eq!(
            outcome_of(None, Some(1000), Some("EOF"), Some(true), 0.2),
            Outcome::Error {
                error: ErrorKind::ClosedBeforeResponse,
                status: None
            }
        );
        // A 200 the script's response callback called failed is not ok.
        assert_eq!(
            outcome_of(Some(200), None, None, Some(true), 0.1).label(),
            "error"
        );
    }

    fn point(metric: &str, time: &str, value: f64, tags: &str) -> String {
        format!(
            r#"{{"metric":"{metric}","type":"Point","data":{{"time":"{time}","value":{value},"tags":{tags}}}}}"#
        )
    }

    #[test]
    fn a_k6_file_streams_into_requests_paired_with_their_failed_sample() {
        let ok = r#"{"expected_response":"true","method":"GET","name":"http://127.0.0.1:1/call?token=sekrit","scenario":"calls","status":"200"}"#;
        // No expected_response tag: the http_req_failed sample decides.
        let to = r#"{"error":"request timeout","error_code":"1050","method":"GET","name":"http://127.0.0.1:1/call","scenario":"slow","status":"0"}"#;
        let text = [
            r#"{"type":"Metric","data":{"name":"http_req_duration","type":"trend"},"metric":"http_req_duration"}"#.to_string(),
            point("http_reqs", "2026-12-01T10:00:01.5Z", 1.0, ok),
            point("http_req_duration", "2026-12-01T10:00:01.5Z", 500.0, ok),
            point("http_req_failed", "2026-12-01T10:00:01.5Z", 0.0, ok),
            point("http_req_duration", "2026-12-01T10:00:02Z", 700.0, to),
            point("iterations", "2026-12-01T10:00:02Z", 1.0, "{}"),
            point("http_req_failed", "2026-12-01T10:00:02Z", 1.0, to),
        ]
        .join("\n");
        let dir = crate::sources::tests::tempdir();
        let path = dir.join("r.json");
        std::fs::write(&path, &text).unwrap();
        let mut s = K6Stream::open(&path).unwrap();
        assert!((s.anchor_unix_s - parse_rfc3339("2026-12-01T10:00:01Z").unwrap()).abs() < 1e-6);
        let a = s.next_record().unwrap();
        let b = s.next_record().unwrap();
        assert!(s.next_record().is_none());
        assert_eq!(
            s.skipped_count, 0,
            "metric declarations are not errors: {:?}",
            s.skipped
        );
        let Event::Request {
            start_s,
            duration_s,
            outcome,
            group,
            detail,
            ..
        } = a.event.clone()
        else {
            panic!()
        };
        assert_eq!((a.t_s, start_s, duration_s), (0.5, 0.0, 0.5));
        assert_eq!((outcome, group.as_str()), (Outcome::Ok, "calls"));
        assert!(
            !detail.unwrap().contains("sekrit"),
            "no query string is kept"
        );
        let Event::Request { outcome, group, .. } = b.event else {
            panic!()
        };
        assert_eq!(outcome.label(), "timeout");
        assert_eq!(group, "slow");
        // The same file gzipped reads the same.
        let gz = dir.join("r.json.gz");
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
        enc.finish().unwrap();
        let mut z = K6Stream::open(&gz).unwrap();
        assert_eq!(z.next_record().unwrap(), a);
    }

    #[test]
    fn a_file_that_is_not_k6_output_says_what_to_give() {
        let dir = crate::sources::tests::tempdir();
        let path = dir.join("x.json");
        std::fs::write(&path, "{\"hello\":1}\n").unwrap();
        let e = K6Stream::open(&path).err().unwrap();
        assert!(format!("{e:#}").contains("--out json=FILE"), "{e:#}");
    }
}
