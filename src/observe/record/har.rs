//! HTTP exchanges as HAR 1.2 (the format of browsers' developer tools, mitmproxy and k6's
//! converter): what `wrap --proxy … --record FILE` writes, and what `replay` reads, including a HAR
//! written elsewhere. Reading tolerates every optional field missing (and most required ones: a
//! hand-written HAR often leaves out `cookies`, `headersSize` or `cache`) and ignores fields it does
//! not know (a browser's `_initiator`, `_priority`, …).

use serde::{Deserialize, Serialize};

/// The whole file: `{"log": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Har {
    pub log: Log,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Log {
    #[serde(default = "version_1_2")]
    pub version: String,
    #[serde(default)]
    pub creator: Creator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<Creator>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pages: Vec<serde_json::Value>,
    #[serde(default)]
    pub entries: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

fn version_1_2() -> String {
    "1.2".into()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Creator {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl Creator {
    pub fn witness() -> Self {
        Self {
            name: "witness".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            comment: None,
        }
    }
}

/// One exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pageref: Option<String>,
    /// RFC 3339 with milliseconds (`2026-12-04T16:52:14.123Z`; another offset is read too).
    pub started_date_time: String,
    /// The whole exchange, in ms (−1 or absent when unknown).
    #[serde(default)]
    pub time: f64,
    pub request: Request,
    #[serde(default)]
    pub response: Response,
    #[serde(default)]
    pub cache: serde_json::Value,
    #[serde(default)]
    pub timings: Timings,
    #[serde(
        default,
        rename = "serverIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub server_ip_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl Entry {
    /// When the exchange started, in ms since the Unix epoch (`None`: not RFC 3339).
    pub fn started_unix_ms(&self) -> Option<f64> {
        parse_rfc3339_ms(&self.started_date_time)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub method: String,
    pub url: String,
    #[serde(default = "http_1_1")]
    pub http_version: String,
    #[serde(default)]
    pub cookies: Vec<Cookie>,
    #[serde(default)]
    pub headers: Vec<NameValue>,
    #[serde(default)]
    pub query_string: Vec<NameValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_data: Option<PostData>,
    #[serde(default = "unknown")]
    pub headers_size: i64,
    #[serde(default = "unknown")]
    pub body_size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl Request {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn http_1_1() -> String {
    "HTTP/1.1".into()
}

fn unknown() -> i64 {
    -1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub status_text: String,
    #[serde(default = "http_1_1")]
    pub http_version: String,
    #[serde(default)]
    pub cookies: Vec<Cookie>,
    #[serde(default)]
    pub headers: Vec<NameValue>,
    #[serde(default)]
    pub content: Content,
    #[serde(default, rename = "redirectURL")]
    pub redirect_url: String,
    #[serde(default = "unknown")]
    pub headers_size: i64,
    #[serde(default = "unknown")]
    pub body_size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl Default for Response {
    fn default() -> Self {
        Self {
            status: 0,
            status_text: String::new(),
            http_version: http_1_1(),
            cookies: Vec::new(),
            headers: Vec::new(),
            content: Content::default(),
            redirect_url: String::new(),
            headers_size: -1,
            body_size: -1,
            comment: None,
        }
    }
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'a>(headers: &'a [NameValue], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NameValue {
    pub name: String,
    #[serde(default)]
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl NameValue {
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
            comment: None,
        }
    }
}

/// A cookie (read and kept, never written by witness: its values are credentials).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cookie {
    pub name: String,
    #[serde(default)]
    pub value: String,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostData {
    #[serde(default)]
    pub mime_type: String,
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    /// The body's length as received (bytes).
    #[serde(default)]
    pub size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<i64>,
    #[serde(default)]
    pub mime_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `"base64"` when `text` is base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// Phases in ms; −1 is "does not apply".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    #[serde(default = "minus_one")]
    pub blocked: f64,
    #[serde(default = "minus_one")]
    pub dns: f64,
    #[serde(default = "minus_one")]
    pub connect: f64,
    #[serde(default)]
    pub send: f64,
    #[serde(default)]
    pub wait: f64,
    #[serde(default)]
    pub receive: f64,
    #[serde(default = "minus_one")]
    pub ssl: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            blocked: -1.0,
            dns: -1.0,
            connect: -1.0,
            send: 0.0,
            wait: 0.0,
            receive: 0.0,
            ssl: -1.0,
            comment: None,
        }
    }
}

fn minus_one() -> f64 {
    -1.0
}

/// `2026-12-04T16:52:14.123Z` for a time in ms since the Unix epoch.
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(t).to_string()
}

/// An RFC 3339 time (any offset, any number of fractional digits) in ms since the Unix epoch.
pub fn parse_rfc3339_ms(s: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(s.trim()).ok()?;
    Some(t.timestamp_micros() as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browser_style_har_with_fields_missing_and_unknown_reads() {
        let text = r#"{"log":{"version":"1.2","creator":{"name":"Firefox","version":"120"},
            "entries":[{"startedDateTime":"2026-01-02T03:04:05.250+01:00","time":12.5,
            "_priority":"High","request":{"method":"GET","url":"http://127.0.0.1:1/a?x=1",
            "headers":[{"name":"Accept","value":"*/*"}]},
            "response":{"status":200,"content":{"mimeType":"text/plain","text":"hi"}}},
            {"startedDateTime":"2026-01-02T02:04:05.500Z","request":{"method":"POST",
            "url":"http://127.0.0.1:1/b","postData":{"mimeType":"application/json","text":"{}"}}}]}}"#;
        let har: Har = serde_json::from_str(text).unwrap();
        assert_eq!(har.log.entries.len(), 2);
        let a = &har.log.entries[0];
        let b = &har.log.entries[1];
        assert_eq!(a.request.header("accept"), Some("*/*"));
        assert_eq!(a.response.content.text.as_deref(), Some("hi"));
        assert_eq!(
            b.started_unix_ms().unwrap() - a.started_unix_ms().unwrap(),
            250.0
        );
        assert_eq!(b.request.post_data.as_ref().unwrap().text, "{}");
    }

    #[test]
    fn times_round_trip_in_milliseconds() {
        let s = rfc3339_ms(1_780_000_000_123);
        assert_eq!(s, "2026-05-28T20:26:40.123Z");
        assert_eq!(parse_rfc3339_ms(&s), Some(1_780_000_000_123.0));
    }
}
