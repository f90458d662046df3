//! The recording (`wrap --record FILE`): the payloads a real client sent and what the server
//! answered, masked and bounded, as the session goes; read back by `replay`.
//!
//! - MCP over stdio: JSONL (stdio.rs says the lines), written by the relay.
//! - HTTP through `--proxy`: HAR 1.2 (har.rs), written by the proxy; [`open`] reads a HAR written
//!   elsewhere too (a browser's export).
//!
//! A recording is not the journal: the journal holds timings and outcomes, the recording holds what
//! was said, so a session can be played again. It never holds a secret (mask.rs).

pub mod har;
pub mod mask;
pub mod stdio;
pub mod write;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

pub use har::Har;
pub use mask::Masker;
pub use stdio::StdioRecording;
pub use write::{HarRecorder, Settings, StdioRecorder, Summary};

/// A recording read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Recording {
    /// An MCP session over stdio (witness's JSONL).
    Stdio(StdioRecording),
    /// HTTP exchanges (HAR 1.2, witness's or another tool's).
    Http(Har),
}

/// Why a file could not be read as a recording.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot read the recording {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is empty: it holds no recording")]
    Empty { path: PathBuf },
    #[error("{path}: its first line is not a witness recording's header ({why}); a recording starts with {{\"witness_recording\":1,…}}")]
    BadHeader { path: PathBuf, why: String },
    #[error(
        "{path} is a witness recording of version {version}; this witness reads version {}",
        stdio::VERSION
    )]
    Version { path: PathBuf, version: u32 },
    #[error(
        "{path} is not a HAR file ({why}); a HAR is a JSON object {{\"log\":{{\"entries\":[…]}}}}"
    )]
    BadHar { path: PathBuf, why: String },
}

/// Reads a recording: witness's stdio JSONL (its first line is the header) or a HAR (JSON whose
/// top object has `log`).
pub fn open(path: impl AsRef<Path>) -> Result<Recording, OpenError> {
    let path = path.as_ref();
    let io = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let mut first = String::new();
    // The first line decides; a HAR's first line is `{` or `{"log":…` (pretty or compact).
    reader.read_line(&mut first).map_err(io)?;
    let start = first.trim_start_matches('\u{feff}').trim_start();
    if start.is_empty() && reader.fill_buf().map_err(io)?.is_empty() {
        return Err(OpenError::Empty {
            path: path.to_path_buf(),
        });
    }
    if start.starts_with("{\"witness_recording\"") || start.contains("\"witness_recording\"") {
        let header: stdio::Header =
            serde_json::from_str(start).map_err(|e| OpenError::BadHeader {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?;
        if header.witness_recording != stdio::VERSION {
            return Err(OpenError::Version {
                path: path.to_path_buf(),
                version: header.witness_recording,
            });
        }
        if header.transport != "stdio" {
            return Err(OpenError::BadHeader {
                path: path.to_path_buf(),
                why: format!("transport {:?}, expected \"stdio\"", header.transport),
            });
        }
        // A line that is not UTF-8 (cut by a kill mid-character) is read lossily and counted.
        let mut lines = Vec::new();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            lines.push(String::from_utf8_lossy(&buf).into_owned());
        }
        return Ok(Recording::Stdio(StdioRecording::read(
            header,
            lines.into_iter(),
        )));
    }
    let mut text = first;
    reader.read_to_string(&mut text).map_err(io)?;
    let text = text.trim_start_matches('\u{feff}');
    let har: Har = serde_json::from_str(text).map_err(|e| OpenError::BadHar {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Ok(Recording::Http(har))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("witness-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn open_tells_a_stdio_recording_from_a_har_and_says_what_is_wrong() {
        let s = file(
            "s.jsonl",
            "{\"witness_recording\":1,\"transport\":\"stdio\",\"started_unix_ms\":5,\"command\":[\"x\"],\"max_bytes\":9,\"answer_bytes\":9}\n{\"t\":0.5,\"from\":\"client\",\"msg\":{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"}}\n",
        );
        match open(&s).unwrap() {
            Recording::Stdio(r) => {
                assert_eq!(r.client[0].method(), Some("initialize"));
                assert_eq!(r.header.started_unix_ms, 5);
            }
            other => panic!("{other:?}"),
        }
        let h = file(
            "h.har",
            "{\n  \"log\": {\"version\":\"1.2\",\"entries\":[]}\n}\n",
        );
        assert!(matches!(open(&h).unwrap(), Recording::Http(_)));
        let e = open(file("e", "")).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = open(file("b", "[1,2]")).unwrap_err().to_string();
        assert!(e.contains("not a HAR"), "{e}");
        let e = open(file("v", "{\"witness_recording\":9,\"transport\":\"stdio\",\"started_unix_ms\":5,\"max_bytes\":9,\"answer_bytes\":9}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("version 9"), "{e}");
    }
}
