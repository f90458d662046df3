//! `witness replay FILE`: a recording (`wrap --record`'s MCP stdio JSONL, or a HAR) played again as
//! load. The recording is read, checked against the way it is to be played (a stdio session needs
//! the server's command, a HAR a `--url`) and made ready ([`plan`]: its calls, their kinds, what was
//! recorded of their answers, the handshake), then `load` runs it: its levels are the speeds,
//! each an open-loop level whose schedule is the recording's (load/replay.rs), with the same
//! supervision, health, identity, verdicts and views, and the answers compared with the recorded
//! ones. Exit codes are `load`'s.

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};
use serde_json::Value;

use crate::analyze::answers::{Body, Compare, Said, NAMES_KEPT};
use crate::cli::{CompareMode, LoadArgs, OpenArgs, ProtocolArgs, ReplayArgs};
use crate::error::usage;
use crate::journal::ReplayName;
use crate::load::settings::{Call, Replay, Send};
use crate::observe::record::stdio::AnswerOutcome;
use crate::observe::record::Recording;
use crate::observe::record::{Har, StdioRecording};

pub async fn run(a: ReplayArgs) -> anyhow::Result<i32> {
    let file = a.file.display().to_string();
    let recording = crate::observe::record::open(&a.file).map_err(|e| {
        usage(format!(
            "{e}. witness replays what `witness wrap --record FILE` wrote (MCP over stdio), or a HAR file"
        ))
    })?;
    let stdio = matches!(recording, Recording::Stdio(_));
    if stdio && a.url.is_some() {
        return Err(usage(format!(
            "{file} is an MCP session recorded over stdio: it replays against the server's command after `--` (e.g. `witness replay {file} -- python3 server.py`), not --url"
        )));
    }
    if stdio && a.command.is_empty() {
        return Err(usage(format!(
            "{file} is an MCP session recorded over stdio: give the server's command after `--`, e.g. `witness replay {file} -- python3 server.py`"
        )));
    }
    if !stdio && a.url.is_none() {
        return Err(usage(format!(
            "{file} is an HTTP recording (HAR): give --url http://127.0.0.1:PORT/ (its scheme, host and port replace the recorded ones)"
        )));
    }
    let compare = match a.compare {
        CompareMode::Outcome => Compare::Outcome,
        CompareMode::Shape => Compare::Shape,
        CompareMode::Exact => Compare::Exact,
    };
    let sessions = a.sessions;
    let load = load_args(a, stdio);
    // The --header values go on every replayed HTTP request; --url's origin replaces the recorded.
    let (headers, _) = super::load::request_headers(&load)?;
    let base = match &load.url {
        Some(u) => Some(crate::load::url::http_url("--url", u).map_err(usage)?),
        None => None,
    };
    let o = Options {
        base: base.as_ref(),
        headers: &headers,
        sessions,
        compare,
        max_in_flight: load.open.max_in_flight,
    };
    let replay =
        plan(&recording, &o).map_err(|e| usage(format!("{file}: cannot be replayed: {e}")))?;
    super::load::run_with(load, Some(super::load::ReplayPlan { file, replay })).await
}

/// `load`'s arguments for a replay: one rate level per speed (the speed stands for its rate), MCP
/// over stdio for a stdio recording, plain HTTP to --url for a HAR.
fn load_args(a: ReplayArgs, stdio: bool) -> LoadArgs {
    LoadArgs {
        asserts: a.asserts,
        assert_abort: a.assert_abort,
        url: a.url,
        mcp: stdio.then(|| "(replay)".to_string()),
        tool_args: None,
        mcp_protocol: None,
        method: None,
        body: None,
        header: a.header,
        secret_header: a.secret_header,
        header_env: a.header_env,
        health_url: a.health_url,
        levels: vec![1],
        rounds: None,
        duration: None,
        timeout: a.timeout,
        connect_timeout: a.connect_timeout,
        settle: a.settle,
        factor: a.factor,
        cliff_slack: a.cliff_slack,
        max_connect_floor: a.max_connect_floor,
        allow_remote: a.allow_remote,
        reject_status: a.reject_status,
        reject_body: a.reject_body,
        accept_status: a.accept_status,
        max_body: a.max_body,
        ready_timeout: a.ready_timeout,
        health_timeout: a.health_timeout,
        sample_interval: a.sample_interval,
        show_output: a.show_output,
        open: OpenArgs {
            rates: a.speeds,
            arrivals: crate::cli::Arrivals::Constant,
            seed: Some(0),
            max_in_flight: a.max_in_flight,
            find_limit: a.find_limit,
            resolution: a.resolution,
            max_levels: a.max_levels,
        },
        gpu: a.gpu,
        supervise: a.supervise,
        container: a.container,
        output: a.output,
        tls: a.tls,
        protocol: ProtocolArgs::default(),
        command: a.command,
    }
}

/// What [`plan`] is told besides the recording.
pub struct Options<'a> {
    /// `--url` (HTTP): its scheme, host and port replace the recorded ones.
    pub base: Option<&'a Uri>,
    /// `--header`s: added to every HTTP request, in place of a recorded header of that name.
    pub headers: &'a HeaderMap,
    pub sessions: u32,
    pub compare: Compare,
    pub max_in_flight: u32,
}

/// The calls of a recording, ready to play; Err: why it cannot be replayed, in words.
pub fn plan(rec: &Recording, o: &Options) -> Result<Replay, String> {
    let mut names = Names::default();
    let mut notes = Vec::new();
    let (mut calls, transport, initialize) = match rec {
        Recording::Stdio(s) => {
            let (calls, init) = stdio_calls(s, &mut names, &mut notes);
            (calls, "stdio", init)
        }
        Recording::Http(h) => {
            let base = o
                .base
                .ok_or("an HTTP recording (HAR) replays against --url (its scheme, host and port replace the recorded ones)")?;
            (
                http_calls(h, base, o.headers, &mut names, &mut notes)?,
                "http",
                None,
            )
        }
    };
    if calls.is_empty() {
        return Err("it holds no request to replay".into());
    }
    calls.sort_by(|a, b| a.offset_s.total_cmp(&b.offset_s));
    let first = calls[0].offset_s;
    for c in calls.iter_mut() {
        c.offset_s -= first;
    }
    let span_s = calls.last().map_or(0.0, |c| c.offset_s);
    Ok(Replay {
        calls,
        names: names.finish(),
        transport,
        sessions: o.sessions,
        compare: o.compare,
        span_s,
        max_in_flight: o.max_in_flight,
        initialize,
        notes,
    })
}

/// The kinds of call, in the order first sent, with their recorded durations.
#[derive(Default)]
struct Names {
    names: Vec<(String, u64, Vec<f64>)>,
}

impl Names {
    fn index(&mut self, name: &str, took: Option<f64>) -> usize {
        let i = match self.names.iter().position(|(n, ..)| n == name) {
            Some(i) => i,
            None if self.names.len() < NAMES_KEPT => {
                self.names.push((name.to_string(), 0, Vec::new()));
                self.names.len() - 1
            }
            // Past the cap: one kind for the rest.
            None => match self.names.iter().position(|(n, ..)| n == "(other)") {
                Some(i) => i,
                None => {
                    self.names.push(("(other)".into(), 0, Vec::new()));
                    self.names.len() - 1
                }
            },
        };
        self.names[i].1 += 1;
        if let Some(t) = took.filter(|t| t.is_finite() && *t >= 0.0) {
            self.names[i].2.push(t);
        }
        i
    }

    fn finish(self) -> Vec<ReplayName> {
        self.names
            .into_iter()
            .map(|(name, calls, took)| ReplayName {
                name,
                calls,
                recorded_p99_s: crate::stats::latency_of(took).map(|l| l.p99),
            })
            .collect()
    }
}

/// A recorded JSON-RPC answer as the comparison sees it.
fn said_recorded(a: &crate::observe::record::stdio::Answer) -> Said {
    let body = || a.result.clone().filter(|_| !a.result_cut).map(Body::Json);
    match a.outcome {
        AnswerOutcome::Ok => Said {
            outcome: "ok".into(),
            body: body(),
        },
        AnswerOutcome::ToolError => Said {
            outcome: "tool error".into(),
            body: body(),
        },
        AnswerOutcome::Error => Said {
            outcome: format!("JSON-RPC error {}", a.code.unwrap_or(0)),
            body: None,
        },
    }
}

fn stdio_calls(
    s: &StdioRecording,
    names: &mut Names,
    notes: &mut Vec<String>,
) -> (Vec<Call>, Option<Value>) {
    let mut initialize = None;
    let mut calls = Vec::new();
    let mut skipped = 0u64;
    for m in &s.client {
        match (m.method(), m.id()) {
            (Some("initialize"), Some(_)) if initialize.is_none() => {
                initialize = Some(m.msg.get("params").cloned().unwrap_or(Value::Null));
            }
            (Some(method), Some(id)) => {
                let name = match m.tool() {
                    Some(t) => format!("{method} {t}"),
                    None => method.to_string(),
                };
                let answer = s.answer_to(id);
                let took = answer.map(|a| a.t - m.t);
                calls.push(Call {
                    offset_s: m.t,
                    name: names.index(&name, took),
                    send: Send::Mcp {
                        method: method.to_string(),
                        params: m.msg.get("params").cloned().unwrap_or(Value::Null),
                    },
                    recorded: answer.map(said_recorded),
                });
            }
            (Some("notifications/initialized"), None) => {}
            _ => skipped += 1,
        }
    }
    if skipped > 0 {
        notes.push(format!(
            "{skipped} client message{} not replayed (notifications after the handshake, answers to the server's requests)",
            if skipped == 1 { "" } else { "s" }
        ));
    }
    if let Some(n) = &s.note {
        if n.not_kept > 0 {
            notes.push(format!(
                "the recording did not keep {} message{} ({}): they are not replayed",
                n.not_kept,
                if n.not_kept == 1 { "" } else { "s" },
                n.note
            ));
        }
    }
    let masked = s
        .client
        .iter()
        .filter(|m| {
            m.msg
                .to_string()
                .contains(&format!("\"{}\"", crate::secrets::MASK))
        })
        .count();
    if masked > 0 {
        notes.push(format!(
            "{masked} recorded call{} held masked values (\"{}\"): replayed as masked",
            if masked == 1 { "" } else { "s" },
            crate::secrets::MASK
        ));
    }
    (calls, initialize)
}

/// Headers never replayed: the connection's own, the HTTP/2 pseudo-headers, and an encoding the
/// comparison could not read.
fn replayable(name: &str) -> bool {
    const DROP: [&str; 11] = [
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "accept-encoding",
        "upgrade",
        "proxy-connection",
        "te",
        "trailer",
        "http2-settings",
    ];
    !name.starts_with(':') && !DROP.contains(&name.to_ascii_lowercase().as_str())
}

fn http_calls(
    h: &Har,
    base: &Uri,
    extra: &HeaderMap,
    names: &mut Names,
    notes: &mut Vec<String>,
) -> Result<Vec<Call>, String> {
    let mut calls = Vec::new();
    let mut masked = 0u64;
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    for (i, e) in h.log.entries.iter().enumerate() {
        let at = e.started_unix_ms().ok_or_else(|| {
            format!(
                "entry {i}: startedDateTime {:?} is not an RFC 3339 time",
                e.started_date_time
            )
        })?;
        let recorded: Uri = e
            .request
            .url
            .parse()
            .map_err(|err| format!("entry {i}: url {:?} is not a URL: {err}", e.request.url))?;
        let path = recorded.path_and_query().map_or("/", |p| p.as_str());
        let uri: Uri = format!("{scheme}://{authority}{path}")
            .parse()
            .map_err(|err| format!("entry {i}: {path:?} does not make a URL with --url: {err}"))?;
        let method = Method::from_bytes(e.request.method.as_bytes())
            .map_err(|_| format!("entry {i}: {:?} is not an HTTP method", e.request.method))?;
        let mut headers = HeaderMap::new();
        for nv in e.request.headers.iter().filter(|nv| replayable(&nv.name)) {
            if nv.value.contains(crate::secrets::MASK) {
                masked += 1;
                continue;
            }
            let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(nv.name.as_bytes()),
                HeaderValue::from_str(&nv.value),
            ) else {
                continue;
            };
            if !extra.contains_key(&k) {
                headers.append(k, v);
            }
        }
        for (k, v) in extra {
            headers.append(k.clone(), v.clone());
        }
        let body = e
            .request
            .post_data
            .as_ref()
            .map(|p| Bytes::from(p.text.clone()))
            .unwrap_or_default();
        let name = format!("{} {}", method, recorded.path());
        let took = (e.time >= 0.0).then_some(e.time / 1000.0);
        let content = &e.response.content;
        // A body kept as it was sent (not base64, not cut) is compared; else the status only.
        let kept = content
            .text
            .as_ref()
            .filter(|_| content.encoding.is_none() && content.comment.is_none());
        let recorded_said = (e.response.status > 0).then(|| Said {
            outcome: format!("status {}", e.response.status),
            body: kept.map(|t| Body::of_text(t)),
        });
        calls.push(Call {
            offset_s: at / 1000.0,
            name: names.index(&name, took),
            send: Send::Http {
                method,
                uri,
                headers,
                body,
            },
            recorded: recorded_said,
        });
    }
    if masked > 0 {
        notes.push(format!(
            "{masked} recorded header{} masked (credentials): not replayed; give --header to send your own",
            if masked == 1 { " was" } else { "s were" }
        ));
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Event;

    fn stdio(lines: &[&str]) -> Recording {
        let header = serde_json::from_str(
            r#"{"witness_recording":1,"transport":"stdio","started_unix_ms":1,"command":["x"],"max_bytes":9,"answer_bytes":9}"#,
        )
        .unwrap();
        Recording::Stdio(StdioRecording::read(
            header,
            lines.iter().map(|l| l.to_string()),
        ))
    }

    fn options(h: &HeaderMap) -> Options<'_> {
        Options {
            base: None,
            headers: h,
            sessions: 2,
            compare: Compare::Shape,
            max_in_flight: 10,
        }
    }

    #[test]
    fn a_stdio_recording_opens_as_recorded_and_its_calls_start_at_zero() {
        let r = stdio(&[
            r#"{"t":0.1,"from":"client","msg":{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"py"}}}}"#,
            r#"{"t":0.2,"from":"client","msg":{"jsonrpc":"2.0","method":"notifications/initialized"}}"#,
            r#"{"t":1.0,"from":"client","msg":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work","arguments":{"ms":5}}}}"#,
            r#"{"t":1.25,"from":"server","id":1,"outcome":"ok","result":{"content":[]}}"#,
            r#"{"t":3.0,"from":"client","msg":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{}}}}"#,
            r#"{"t":3.5,"from":"server","id":2,"outcome":"error","code":-32602,"message":"bad"}"#,
        ]);
        let h = HeaderMap::new();
        let p = plan(&r, &options(&h)).unwrap();
        assert_eq!(p.initialize.as_ref().unwrap()["clientInfo"]["name"], "py");
        assert_eq!(p.calls.len(), 2);
        assert_eq!((p.calls[0].offset_s, p.calls[1].offset_s), (0.0, 2.0));
        assert_eq!(p.span_s, 2.0);
        assert_eq!(p.sends(), 4);
        assert_eq!(p.names[0].name, "tools/call work");
        assert_eq!(p.names[0].recorded_p99_s, Some(0.25));
        assert_eq!(
            p.calls[1].recorded.as_ref().unwrap().outcome,
            "JSON-RPC error -32602"
        );
        assert!(p.sessions_how().contains("multiplexed"));
        let Event::Replay { pacing, .. } = p.event("f") else {
            panic!()
        };
        assert_eq!(
            (pacing[0], pacing[49], pacing.iter().sum::<u32>()),
            (2, 2, 4)
        );
        let empty = stdio(&[]);
        assert!(plan(&empty, &options(&h))
            .unwrap_err()
            .contains("no request"));
    }

    #[test]
    fn a_har_goes_to_the_url_given_without_masked_or_connection_headers() {
        let har: Har = serde_json::from_str(
            r#"{"log":{"version":"1.2","entries":[
            {"startedDateTime":"2026-01-02T03:04:05.500Z","time":20,"request":{"method":"GET","url":"https://example.com:8443/a?x=1",
             "headers":[{"name":":authority","value":"example.com"},{"name":"Accept-Encoding","value":"gzip"},{"name":"Authorization","value":"Bearer ***"},{"name":"X-Kind","value":"k"}]},
             "response":{"status":200,"content":{"mimeType":"application/json","text":"{\"a\":1}"}}}]}}"#,
        )
        .unwrap();
        let base: Uri = "http://127.0.0.1:9/ignored".parse().unwrap();
        let h = HeaderMap::new();
        let mut o = options(&h);
        o.base = Some(&base);
        let p = plan(&Recording::Http(har.clone()), &o).unwrap();
        let Send::Http { uri, headers, .. } = &p.calls[0].send else {
            panic!()
        };
        assert_eq!(uri.to_string(), "http://127.0.0.1:9/a?x=1");
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(p.names[0].name, "GET /a");
        assert!(p.notes[0].contains("masked"), "{:?}", p.notes);
        o.base = None;
        assert!(plan(&Recording::Http(har), &o)
            .unwrap_err()
            .contains("--url"));
    }
}
