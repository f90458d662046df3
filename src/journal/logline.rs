//! Log lines with structure: a JSON object per line (Go's zap and slog, Rust's tracing JSON layer,
//! Python's structlog and JSON formatters, Node's pino and bunyan) or logfmt (`level=error msg="…"`).
//!
//! One pure parser, used by the log reader (to label a line from its level and message, never from
//! a field's name) and by every view (to show the level and message first, with the few fields a
//! person needs). The journal keeps the raw line; what is shown is derived from it here, so old
//! journals read the same way. A plain line is no structured line: [`parse`] says None and every
//! caller treats it as before.

use std::borrow::Cow;

/// The most characters of one field's value that a view shows.
const VALUE_CHARS: usize = 120;
/// The most bytes of a line's error fields that labels are read from.
const ERROR_WORDS: usize = 4096;

/// What a structured line says, in the order a person reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Structured {
    /// The level in lowercase words (`error`, `info`; pino's 50 reads `error`).
    pub level: Option<String>,
    /// The message (`msg`, `message`, structlog's `event`, or the error when nothing else).
    pub msg: Option<String>,
    /// The time field as written (`ts`, `time`, `timestamp`).
    pub time: Option<String>,
    /// The fields worth showing beside the message: status, duration, error; `(key, value)`.
    pub fields: Vec<(String, String)>,
    /// A duration field, in seconds (`"duration":2.001`, `duration=2.001s`, `elapsed_ms=2001`).
    pub duration_s: Option<f64>,
    /// The error fields whole (a traceback in `exc_info`), bounded: words for the labels.
    pub error_words: String,
}

impl Structured {
    /// The words labels are read from: the message and the error, never a field's name, nor a
    /// line of code a traceback in them quotes.
    pub fn words(&self) -> String {
        let mut w = without_code(self.msg.as_deref().unwrap_or_default()).into_owned();
        if !self.error_words.is_empty() {
            w.push(' ');
            w.push_str(&self.error_words);
        }
        w
    }

    /// The line as views show it: "error: net/http: timeout awaiting response headers (status=504
    /// duration=2.001)".
    pub fn shown(&self) -> String {
        let mut s = String::new();
        if let Some(l) = &self.level {
            s.push_str(l);
            s.push_str(": ");
        }
        s.push_str(self.msg.as_deref().unwrap_or(""));
        if !self.fields.is_empty() {
            let f: Vec<String> = self
                .fields
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            s.push_str(&format!(" ({})", f.join(" ")));
        }
        s
    }

    /// Whether the message says a timer fired (timeout, deadline, timed out).
    pub fn says_timeout(&self) -> bool {
        let w = self.words().to_ascii_lowercase();
        w.contains("timeout") || w.contains("timed out") || w.contains("deadline")
    }
}

/// A frame of a stack trace: a place in the code, not something that happened. Python's
/// `  File "app.py", line 3, in poll`; Java's and Node's indented `at Timeout._onTimeout
/// (node:internal/timers:569:17)`.
pub fn is_frame(line: &str) -> bool {
    let t = line.trim_start();
    if t.starts_with("File \"") && t.contains("\", line ") {
        return true;
    }
    let t = t.trim_end();
    let indented = t.len() < line.trim_end().len();
    let located = t.ends_with(')')
        || t.rsplit_once(':')
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    indented && t.starts_with("at ") && located
}

/// A line of code a traceback quotes rather than an event: a frame, or the indented line under one
/// (Python prints each frame's source line there: `    fd_event_list = self._selector.poll(timeout)`).
/// `after_frame`: the line before it was a frame.
pub fn is_quoted_code(line: &str, after_frame: bool) -> bool {
    is_frame(line) || (after_frame && line.starts_with([' ', '\t']))
}

/// Text with the code its tracebacks quote left out (frames, their source lines, the carets under
/// them): what a message or an error field says happened.
pub fn without_code(text: &str) -> Cow<'_, str> {
    if !text.contains('\n') {
        return if is_frame(text) {
            Cow::Borrowed("")
        } else {
            Cow::Borrowed(text)
        };
    }
    let mut after_frame = false;
    let mut kept: Vec<&str> = Vec::new();
    for l in text.lines() {
        let carets = !l.trim().is_empty() && l.trim().chars().all(|c| matches!(c, '^' | '~'));
        if !is_quoted_code(l, after_frame) && !carets {
            kept.push(l);
        }
        after_frame = is_frame(l);
    }
    Cow::Owned(kept.join("\n"))
}

/// The line as every view shows it: a structured line's level and message first, a plain line as
/// it is.
pub fn shown(line: &str) -> Cow<'_, str> {
    match parse(line) {
        Some(s) => Cow::Owned(s.shown()),
        None => Cow::Borrowed(line),
    }
}

/// A JSON object or a logfmt line with a message or a level; None for anything else.
pub fn parse(line: &str) -> Option<Structured> {
    let t = line.trim();
    if t.starts_with('{') {
        return parse_json(t);
    }
    parse_logfmt(t)
}

fn is_error_key(k: &str) -> bool {
    matches!(k, "error" | "err" | "exception" | "exc_info")
}

fn is_status_key(k: &str) -> bool {
    matches!(
        k,
        "status" | "status_code" | "statusCode" | "http.status_code"
    )
}

/// A key naming a duration, and the seconds one unit of its bare number holds.
fn duration_key(k: &str) -> Option<f64> {
    let lower = k.to_ascii_lowercase();
    let named = ["duration", "elapsed", "latency", "took", "took_ms"]
        .iter()
        .any(|n| lower.contains(n));
    if !named {
        return None;
    }
    let unit = if lower.ends_with("ms") {
        0.001
    } else if lower.ends_with("_us") || lower.ends_with("micros") {
        1e-6
    } else if lower.ends_with("_ns") || lower.ends_with("nanos") {
        1e-9
    } else {
        1.0
    };
    Some(unit)
}

/// A number of seconds from a duration's value: a bare number in the key's unit, or a Go duration
/// ("2.001s", "1m30s", "150ms", "2.5µs").
fn duration_value(v: &str, unit: f64) -> Option<f64> {
    let v = v.trim();
    if let Ok(n) = v.parse::<f64>() {
        // Go's slog writes a time.Duration as whole nanoseconds ("duration":2001000000): a whole
        // number of a million or more under a key with no unit is that, not 11 days in seconds.
        let whole = !v.contains(['.', 'e', 'E']);
        let unit = if unit == 1.0 && whole && n >= 1e6 {
            1e-9
        } else {
            unit
        };
        return (n.is_finite() && n >= 0.0).then_some(n * unit);
    }
    go_duration(v)
}

/// Go's `time.Duration.String()` and its kin: one or more number-unit pairs.
pub fn go_duration(v: &str) -> Option<f64> {
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * secs;
        rest = &rest[unit_end..];
    }
    total.is_finite().then_some(total)
}

/// A level in words: names as they are (lowercased, shortened), pino's and bunyan's numbers read.
fn level_word(v: &str) -> String {
    if let Ok(n) = v.trim().parse::<f64>() {
        let w = match n as i64 {
            ..=10 => "trace",
            11..=20 => "debug",
            21..=30 => "info",
            31..=40 => "warn",
            41..=50 => "error",
            _ => "fatal",
        };
        return w.to_string();
    }
    let l = v.trim().to_ascii_lowercase();
    match l.as_str() {
        "warning" => "warn".into(),
        "err" => "error".into(),
        "crit" | "critical" => "critical".into(),
        _ => l.chars().take(16).collect(),
    }
}

fn bounded(v: &str) -> String {
    let v = v.trim();
    if v.chars().count() <= VALUE_CHARS {
        v.to_string()
    } else {
        let mut s: String = v.chars().take(VALUE_CHARS).collect();
        s.push('…');
        s
    }
}

/// Builds the reading from `(key, value)` pairs in the line's order; `nested_msg` is a message found
/// below the top level (tracing's `fields.message`).
fn from_pairs(pairs: &[(String, String)], nested_msg: Option<String>) -> Option<Structured> {
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| pairs.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.clone()))
    };
    let level =
        get(&["level", "lvl", "severity", "log.level", "levelname"]).map(|l| level_word(&l));
    let own_msg = get(&["msg", "message", "event"]).or(nested_msg);
    let error = get(&["error", "err"]);
    let (msg, error_as_msg) = match (own_msg, error) {
        (Some(m), _) => (Some(m), false),
        (None, Some(e)) => (Some(e), true),
        (None, None) => (None, false),
    };
    if level.is_none() && msg.is_none() {
        return None;
    }
    let time = get(&["ts", "time", "timestamp", "@timestamp", "asctime", "t"]);
    let mut fields = Vec::new();
    let mut duration_s = None;
    let mut error_words = String::new();
    for (k, v) in pairs {
        if is_status_key(k) {
            fields.push((k.clone(), bounded(v)));
        } else if let Some(unit) = duration_key(k) {
            if let Some(s) = duration_value(v, unit) {
                duration_s.get_or_insert(s);
                fields.push((k.clone(), bounded(v)));
            }
        } else if is_error_key(k) && !error_as_msg {
            // A traceback held in one field (Python's `exc_info`) is told by its last line, the
            // exception.
            let last = v.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(v);
            fields.push((k.clone(), bounded(last)));
            if error_words.len() < ERROR_WORDS {
                // What the error says, not the code its traceback quotes.
                error_words.push_str(&without_code(v));
                error_words.push(' ');
                let mut cut = error_words.len().min(ERROR_WORDS);
                while !error_words.is_char_boundary(cut) {
                    cut -= 1;
                }
                error_words.truncate(cut);
            }
        }
    }
    // Status, then duration, then error, whatever order the line wrote them in.
    fields.sort_by_key(|(k, _)| {
        if is_status_key(k) {
            0
        } else if is_error_key(k) {
            2
        } else {
            1
        }
    });
    Some(Structured {
        level,
        msg: msg.map(|m| bounded_msg(&m)),
        time,
        fields,
        duration_s,
        error_words: error_words.trim_end().to_string(),
    })
}

/// A message is kept longer than a field, but bounded like a line.
fn bounded_msg(m: &str) -> String {
    const MSG_CHARS: usize = 400;
    let m = m.trim();
    if m.chars().count() <= MSG_CHARS {
        m.to_string()
    } else {
        let mut s: String = m.chars().take(MSG_CHARS).collect();
        s.push('…');
        s
    }
}

fn parse_json(t: &str) -> Option<Structured> {
    let v: serde_json::Value = serde_json::from_str(t).ok()?;
    let obj = v.as_object()?;
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Null => None,
        // An error object ({"message": …}) reads as its message; anything else as compact JSON.
        other => Some(
            other
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| other.to_string()),
        ),
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (k, v) in obj {
        if let Some(s) = text(v) {
            pairs.push((k.clone(), s));
        }
    }
    // ECS writes `"log":{"level":…}`; tracing's JSON layer `"fields":{"message":…, …}`.
    if let Some(l) = obj.get("log").and_then(|l| l.get("level")).and_then(text) {
        pairs.push(("log.level".into(), l));
    }
    let mut nested_msg = None;
    if let Some(f) = obj.get("fields").and_then(|f| f.as_object()) {
        for (k, v) in f {
            if k == "message" {
                nested_msg = text(v);
            } else if let Some(s) = text(v) {
                if !pairs.iter().any(|(pk, _)| pk == k) {
                    pairs.push((k.clone(), s));
                }
            }
        }
    }
    from_pairs(&pairs, nested_msg)
}

/// logfmt: `key=value` pairs, a value bare or double-quoted with backslash escapes. A line counts as
/// logfmt only when it opens with a pair and holds a level or a message key, so a plain line that
/// happens to hold an `=` stays plain.
fn parse_logfmt(t: &str) -> Option<Structured> {
    let pairs = logfmt_pairs(t)?;
    let keyed = |k: &str| pairs.iter().any(|(pk, _)| pk == k);
    let known = ["level", "lvl", "severity", "msg", "message", "event"];
    if pairs.len() < 2 || !known.iter().any(|k| keyed(k)) {
        return None;
    }
    from_pairs(&pairs, None)
}

/// The pairs of a logfmt line; None when its first word is no `key=value` or a quote never closes.
pub fn logfmt_pairs(t: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = t.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() || c == '"' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            return None;
        }
        if chars.peek() != Some(&'=') {
            // A bare word: logfmt's flag, but never the first word.
            if pairs.is_empty() {
                return None;
            }
            pairs.push((key, String::new()));
            continue;
        }
        chars.next();
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some('t') => value.push('\t'),
                        Some('r') => value.push('\r'),
                        Some(o) => value.push(o),
                        None => break,
                    },
                    o => value.push(o),
                }
            }
            if !closed {
                return None;
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        pairs.push((key, value));
    }
    (!pairs.is_empty()).then_some(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_zap_line_shows_its_level_message_and_fields() {
        let l = r#"{"level":"error","ts":1796148050.752073,"logger":"http.log.error","msg":"net/http: timeout awaiting response headers","request":{"method":"GET","uri":"/call"},"duration":2.001,"status":504}"#;
        let s = parse(l).unwrap();
        assert_eq!(s.level.as_deref(), Some("error"));
        assert_eq!(s.time.as_deref(), Some("1796148050.752073"));
        assert_eq!(s.duration_s, Some(2.001));
        assert!(s.says_timeout());
        assert_eq!(
            shown(l),
            "error: net/http: timeout awaiting response headers (status=504 duration=2.001)"
        );
    }

    #[test]
    fn a_shutdown_line_words_are_its_message_not_its_fields() {
        let l = r#"{"level":"info","ts":1.5,"msg":"shutting down apps, then terminating","signal":"SIGTERM"}"#;
        let s = parse(l).unwrap();
        assert_eq!(s.words(), "shutting down apps, then terminating");
        assert!(!s.words().contains("SIGTERM"));
    }

    #[test]
    fn go_slog_rust_tracing_structlog_and_pino_read_alike() {
        let slog = r#"{"time":"2026-01-02T03:04:05Z","level":"ERROR","msg":"upstream timed out","err":"context deadline exceeded","elapsed":"1m30s"}"#;
        let s = parse(slog).unwrap();
        assert_eq!(s.level.as_deref(), Some("error"));
        assert_eq!(s.msg.as_deref(), Some("upstream timed out"));
        assert_eq!(s.duration_s, Some(90.0));
        assert!(s.words().contains("context deadline exceeded"));
        let tracing = r#"{"timestamp":"2026-01-02T03:04:05.1Z","level":"WARN","fields":{"message":"request failed","status":503},"target":"app"}"#;
        let s = parse(tracing).unwrap();
        assert_eq!(s.shown(), "warn: request failed (status=503)");
        let structlog =
            r#"{"event": "worker died", "level": "critical", "timestamp": "2026-01-02T03:04:05Z"}"#;
        assert_eq!(shown(structlog), "critical: worker died");
        let pino = r#"{"level":50,"time":1700000000000,"pid":7,"hostname":"h","msg":"boom","elapsed_ms":2001}"#;
        let s = parse(pino).unwrap();
        assert_eq!(s.level.as_deref(), Some("error"));
        assert_eq!(s.duration_s, Some(2.001));
        assert_eq!(
            parse(r#"{"level":60,"msg":"x"}"#).unwrap().level.as_deref(),
            Some("fatal")
        );
        assert_eq!(
            parse(r#"{"level":30,"msg":"x"}"#).unwrap().level.as_deref(),
            Some("info")
        );
        let ecs = r#"{"@timestamp":"t","log.level":"error","message":"m"}"#;
        assert_eq!(shown(ecs), "error: m");
        let nested = r#"{"log":{"level":"warn"},"message":"m"}"#;
        assert_eq!(shown(nested), "warn: m");
        let gcp = r#"{"severity":"ERROR","message":"m","error":{"message":"deep"}}"#;
        assert_eq!(shown(gcp), "error: m (error=deep)");
        let only_err = r#"{"level":"error","error":"dial tcp: connection refused"}"#;
        assert_eq!(shown(only_err), "error: dial tcp: connection refused");
    }

    #[test]
    fn a_python_json_formatter_line_with_its_traceback_in_a_field() {
        let l = r#"{"asctime": "2026-01-02 03:04:05,006", "levelname": "ERROR", "message": "request failed", "exc_info": "Traceback (most recent call last):\n  File \"app.py\", line 3, in f\n    raise ValueError(\"boom\")\nValueError: boom"}"#;
        let s = parse(l).unwrap();
        assert_eq!(s.time.as_deref(), Some("2026-01-02 03:04:05,006"));
        assert_eq!(
            s.shown(),
            "error: request failed (exc_info=ValueError: boom)"
        );
    }

    /// A traceback in an error field is read for its exception, not for the code it quotes: a
    /// selector's `poll(timeout)` is no timeout (a real Python 3.11 traceback).
    #[test]
    fn a_traceback_in_a_field_is_read_for_what_happened_not_its_source_lines() {
        let tb = "Traceback (most recent call last):\n  File \"/srv/app.py\", line 8, in <module>\n  File \"/usr/lib/python3.11/selectors.py\", line 468, in select\n    fd_event_list = self._selector.poll(timeout, max_ev)\n                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\nSystemExit: 1";
        let line =
            serde_json::json!({"levelname": "ERROR", "message": "worker stopped", "exc_info": tb})
                .to_string();
        let s = parse(&line).unwrap();
        assert!(!s.says_timeout(), "{:?}", s.words());
        assert_eq!(
            s.words(),
            "worker stopped Traceback (most recent call last):\nSystemExit: 1"
        );
        // The same traceback ending in a real timeout still says one.
        let fired = tb.replace("SystemExit: 1", "TimeoutError: timed out");
        let line =
            serde_json::json!({"level": "error", "msg": "poll failed", "error": fired}).to_string();
        assert!(parse(&line).unwrap().says_timeout());
    }

    #[test]
    fn frames_and_the_source_under_them_are_code_and_a_message_is_not() {
        assert!(is_frame(
            r#"  File "/usr/lib/python3.11/selectors.py", line 468, in select"#
        ));
        assert!(is_frame("    at Timeout._onTimeout (/app/index.js:5:11)"));
        assert!(is_frame("\tat com.example.Timeout.run(Timeout.java:12)"));
        assert!(is_frame("    at listOnTimeout node:internal/timers:569"));
        let source = "    fd_event_list = self._selector.poll(timeout)";
        assert!(is_quoted_code(source, true));
        assert!(
            !is_quoted_code(source, false),
            "no frame above it: not known to be code"
        );
        for said in [
            "[2026-12-03 18:00:25 +0000] [2156] [CRITICAL] WORKER TIMEOUT (pid:2199)",
            "at 12:00 the upstream timed out",
            "upstream timed out (110: Connection timed out) while reading response header",
        ] {
            assert!(!is_quoted_code(said, false), "{said}");
            assert!(!is_quoted_code(said, true), "{said}");
        }
    }

    #[test]
    fn logfmt_with_quotes_and_escapes() {
        let l = r#"time=2026-01-02T03:04:05Z level=error msg="upstream \"api\" timed out" duration=2.001s status=504"#;
        let s = parse(l).unwrap();
        assert_eq!(s.level.as_deref(), Some("error"));
        assert_eq!(s.msg.as_deref(), Some(r#"upstream "api" timed out"#));
        assert_eq!(s.duration_s, Some(2.001));
        assert_eq!(s.time.as_deref(), Some("2026-01-02T03:04:05Z"));
        assert_eq!(
            s.shown(),
            r#"error: upstream "api" timed out (status=504 duration=2.001s)"#
        );
        let p = logfmt_pairs(r#"a=1 b="x\\y\nz" flag c="""#).unwrap();
        assert_eq!(
            p,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x\\y\nz".into()),
                ("flag".into(), String::new()),
                ("c".into(), String::new()),
            ]
        );
        assert_eq!(
            logfmt_pairs(r#"a="open"#),
            None,
            "a quote that never closes"
        );
    }

    #[test]
    fn durations_in_their_units() {
        assert_eq!(go_duration("1m30s"), Some(90.0));
        assert_eq!(go_duration("150ms"), Some(0.15));
        assert_eq!(go_duration("1h2m3.5s"), Some(3723.5));
        assert!((go_duration("2.5µs").unwrap() - 2.5e-6).abs() < 1e-12);
        assert_eq!(go_duration("2x"), None);
        assert_eq!(go_duration(""), None);
        assert_eq!(
            duration_value("2001", duration_key("elapsed_ms").unwrap()),
            Some(2.001)
        );
        assert_eq!(
            duration_value("2.001", duration_key("duration").unwrap()),
            Some(2.001)
        );
        assert_eq!(duration_key("status"), None);
        // Go's slog: a time.Duration in whole nanoseconds.
        let ns = duration_value("2001000000", duration_key("duration").unwrap()).unwrap();
        assert!((ns - 2.001).abs() < 1e-9, "{ns}");
        assert_eq!(duration_value("30", 1.0), Some(30.0));
    }

    #[test]
    fn plain_and_junk_lines_are_no_structured_lines() {
        for l in [
            "[7] [CRITICAL] WORKER TIMEOUT (pid:9)",
            "[oi] process watchdog: force-exiting after 6s (exit 124)",
            "timeout=30 reached",
            "worker timeout=30 reached",
            "{not json",
            "{\"a\":1}",
            "[1,2,3]",
            "",
            "=== x ===",
            "a=1",
            "\"level\"=error",
        ] {
            assert_eq!(parse(l), None, "{l}");
            assert_eq!(shown(l), l);
        }
    }

    #[test]
    fn a_huge_message_is_bounded() {
        let l = format!(
            r#"{{"level":"error","msg":"{}","error":"{}"}}"#,
            "x".repeat(20_000),
            "y".repeat(5000)
        );
        let s = parse(&l).unwrap();
        assert!(s.shown().chars().count() < 600, "{}", s.shown().len());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,200}") {
            let _ = parse(&s);
            let _ = shown(&s);
            let _ = logfmt_pairs(&s);
            let _ = go_duration(&s);
        }

        #[test]
        fn logfmt_like_input_never_panics(s in "[a-z=\" \\\\.0-9msµ{}:,]{0,80}") {
            let _ = parse(&s);
            let _ = parse(&format!("level=error msg={s}"));
            let _ = parse(&format!("{{\"msg\":{s}}}"));
        }
    }
}
