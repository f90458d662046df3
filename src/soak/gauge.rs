//! User-declared readings for a soak: an HTTP GET (its status, and a number or value at a JSON
//! pointer in its body) or a command (its exit status, and the number it prints). Gauges and the
//! plan's own invariant checks both read through here, each under witness's own time limit, on a
//! fresh connection so a wedged pooled one can never make a healthy server look stuck.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{HeaderMap, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::plan::Source;

/// The most of a body kept for reading a value out of it.
const BODY_LIMIT: usize = 1 << 20;

/// What one HTTP GET answered.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub status: u16,
    pub body: Bytes,
}

/// What one command did.
#[derive(Clone, Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// "exit 0", "exit 3", "killed by a signal".
    pub fn status_text(&self) -> String {
        match self.code {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".into(),
        }
    }
}

/// Reads gauges and checks, each within `limit`.
pub struct Reader {
    client: Client<crate::load::client::Counting, Empty<Bytes>>,
    limit: Duration,
}

impl Reader {
    pub fn new(limit: Duration) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(crate::load::client::uncounted(limit));
        Self { client, limit }
    }

    pub async fn get(&self, uri: &Uri, headers: &HeaderMap) -> Result<Fetched, String> {
        let mut req = hyper::Request::get(uri.clone());
        if let Some(h) = req.headers_mut() {
            h.extend(headers.clone());
        }
        let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
        let work = async {
            let resp = self.client.request(req).await.map_err(|e| {
                let mut text = e.to_string();
                if let Some(s) = std::error::Error::source(&e) {
                    text = format!("{text}: {s}");
                }
                text
            })?;
            let status = resp.status().as_u16();
            let body = http_body_util::Limited::new(resp.into_body(), BODY_LIMIT)
                .collect()
                .await
                .map_err(|e| format!("status {status}, then the body failed: {e}"))?
                .to_bytes();
            Ok::<_, String>(Fetched { status, body })
        };
        tokio::time::timeout(self.limit, work)
            .await
            .map_err(|_| format!("no answer within {}", secs(self.limit)))?
    }

    pub async fn run(&self, argv: &[String]) -> Result<Ran, String> {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(self.limit, cmd.output())
            .await
            .map_err(|_| format!("{:?} still running after {}", argv[0], secs(self.limit)))?
            .map_err(|e| format!("could not run {:?}: {e}", argv[0]))?;
        Ok(Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// A gauge's number: the value at the pointer of a 200 answer, or the first word a command that
    /// exited 0 printed.
    pub async fn number(&self, source: &Source) -> Result<f64, String> {
        match source {
            Source::Http {
                uri,
                headers,
                pointer,
            } => {
                let f = self.get(uri, headers).await?;
                if f.status != 200 {
                    return Err(format!("GET {} answered {}", uri.path(), f.status));
                }
                let v = value_at(&f.body, pointer.as_deref().unwrap_or(""))?;
                v.as_f64().ok_or_else(|| {
                    format!(
                        "{} is {v}, not a number",
                        pointer.as_deref().unwrap_or("the body")
                    )
                })
            }
            Source::Command(argv) => {
                let r = self.run(argv).await?;
                if r.code != Some(0) {
                    return Err(format!(
                        "{:?} ended with {}{}",
                        argv[0],
                        r.status_text(),
                        first_line(&r.stderr)
                            .map(|l| format!(": {l}"))
                            .unwrap_or_default()
                    ));
                }
                number_in(&r.stdout)
            }
        }
    }
}

/// The JSON value at `pointer` ("" is the whole body).
pub fn value_at(body: &[u8], pointer: &str) -> Result<serde_json::Value, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    v.pointer(pointer)
        .cloned()
        .ok_or_else(|| format!("the body has nothing at {pointer}"))
}

/// The first word of a command's output, as a number ("  42\n", "42 rows").
pub fn number_in(out: &str) -> Result<f64, String> {
    let word = out.split_whitespace().next().unwrap_or("");
    word.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| {
            format!(
                "the command printed {:?}, not a number",
                clip(out.trim(), 60)
            )
        })
}

pub fn first_line(s: &str) -> Option<String> {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| clip(l, 200))
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

fn secs(d: Duration) -> String {
    crate::journal::secs(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_come_from_a_pointer_or_the_first_word() {
        let body = br#"{"queued": 3, "db": {"rows": 1200}, "name": "x"}"#;
        assert_eq!(value_at(body, "/db/rows").unwrap(), serde_json::json!(1200));
        assert!(value_at(body, "/nope")
            .unwrap_err()
            .contains("nothing at /nope"));
        assert!(value_at(b"<html>", "/x").unwrap_err().contains("not JSON"));
        assert_eq!(number_in("  42 rows\n").unwrap(), 42.0);
        assert!(number_in("error: locked")
            .unwrap_err()
            .contains("not a number"));
    }

    #[tokio::test]
    async fn a_command_gauge_reads_its_number_and_a_failing_one_says_why() {
        let r = Reader::new(Duration::from_secs(5));
        let ok = Source::Command(vec!["sh".into(), "-c".into(), "echo 17".into()]);
        assert_eq!(r.number(&ok).await.unwrap(), 17.0);
        let bad = Source::Command(vec![
            "sh".into(),
            "-c".into(),
            "echo locked >&2; exit 3".into(),
        ]);
        let e = r.number(&bad).await.unwrap_err();
        assert!(e.contains("exit 3: locked"), "{e}");
    }
}
