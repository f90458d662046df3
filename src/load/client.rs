//! The hot path: sending one request with hyper's pooled client and turning whatever happens into
//! exactly one [`Outcome`] and one duration. The harness's own limits (connect, whole request) are
//! told apart from the server's failures, so a timeout is never reported as the server's latency.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use super::outcome::{classify_response, Rejection};
use crate::journal::{ErrorKind, Outcome, TimeoutPhase};

/// What to send, validated.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The limits of one request: the harness's own.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub connect: Duration,
    pub whole: Duration,
}

/// What one request came to.
#[derive(Clone, Debug)]
pub struct Sent {
    pub start: Instant,
    pub end: Instant,
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub detail: Option<String>,
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The connector the client uses; the connect floor times the very same one.
pub fn connector(connect_timeout: Duration) -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    c.set_connect_timeout(Some(connect_timeout));
    c
}

/// One pooled keep-alive client for all workers (one connection per concurrent worker).
pub fn client(limits: Limits, pool: usize) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(pool.max(1))
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector(limits.connect))
}

/// Sends one request and records its single outcome.
pub async fn send(
    client: &HttpClient,
    spec: &RequestSpec,
    limits: Limits,
    rej: &Rejection,
) -> Sent {
    let start = Instant::now();
    let mut req = hyper::Request::builder()
        .method(spec.method.clone())
        .uri(spec.uri.clone());
    if let Some(h) = req.headers_mut() {
        h.extend(spec.headers.clone());
    }
    let req = match req.body(Full::new(spec.body.clone())) {
        Ok(r) => r,
        Err(e) => {
            return Sent {
                start,
                end: Instant::now(),
                outcome: Outcome::Error {
                    error: ErrorKind::Other,
                    status: None,
                },
                status: None,
                detail: Some(format!("could not build the request: {e}")),
            }
        }
    };
    let work = async {
        let resp = client.request(req).await.map_err(Failure::Client)?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| Failure::Body(e, status))?
            .to_bytes();
        Ok::<_, Failure>((status, body))
    };
    let res = tokio::time::timeout(limits.whole, work).await;
    let end = Instant::now();
    let (outcome, status, detail) = match res {
        Err(_) => (
            Outcome::Timeout {
                phase: TimeoutPhase::Request,
                limit_s: limits.whole.as_secs_f64(),
            },
            None,
            None,
        ),
        Ok(Ok((status, body))) => {
            // The server's reason, for the annotations: the start of an error answer's body.
            let detail = (status >= 400).then(|| super::outcome::body_start(status, &body));
            (classify_response(status, &body, rej), Some(status), detail)
        }
        Ok(Err(f)) => {
            let (o, status, d) = f.classify(limits);
            (o, status, Some(d))
        }
    };
    Sent {
        start,
        end,
        outcome,
        status,
        detail,
    }
}

enum Failure {
    Client(hyper_util::client::legacy::Error),
    Body(hyper::Error, u16),
}

impl Failure {
    fn classify(self, limits: Limits) -> (Outcome, Option<u16>, String) {
        match self {
            Failure::Client(e) => {
                let text = chain(&e);
                let io = io_kind(&e);
                let outcome = if e.is_connect() {
                    match io {
                        Some(std::io::ErrorKind::TimedOut) => Outcome::Timeout {
                            phase: TimeoutPhase::Connect,
                            limit_s: limits.connect.as_secs_f64(),
                        },
                        Some(std::io::ErrorKind::ConnectionRefused) => Outcome::Error {
                            error: ErrorKind::ConnectRefused,
                            status: None,
                        },
                        _ if text.contains("timed out") || text.contains("timeout") => {
                            Outcome::Timeout {
                                phase: TimeoutPhase::Connect,
                                limit_s: limits.connect.as_secs_f64(),
                            }
                        }
                        _ => Outcome::Error {
                            error: ErrorKind::Connect,
                            status: None,
                        },
                    }
                } else {
                    Outcome::Error {
                        error: hyper_kind(&e, io),
                        status: None,
                    }
                };
                (outcome, None, text)
            }
            Failure::Body(e, status) => {
                let io = io_kind(&e);
                let text = chain(&e);
                (
                    Outcome::Error {
                        error: hyper_kind(&e, io),
                        status: None,
                    },
                    Some(status),
                    format!("status {status}, then the body failed: {text}"),
                )
            }
        }
    }
}

fn hyper_kind(e: &(dyn std::error::Error + 'static), io: Option<std::io::ErrorKind>) -> ErrorKind {
    use std::io::ErrorKind as Io;
    if matches!(
        io,
        Some(Io::ConnectionReset | Io::BrokenPipe | Io::ConnectionAborted)
    ) {
        return ErrorKind::Reset;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return ErrorKind::ClosedBeforeResponse;
            }
            if h.is_parse() || h.is_parse_status() || h.is_user() {
                return ErrorKind::Protocol;
            }
        }
        cur = c.source();
    }
    ErrorKind::Other
}

fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = c.source();
    }
    None
}

/// The whole cause chain in one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = c.source();
    }
    parts.join(": ")
}
