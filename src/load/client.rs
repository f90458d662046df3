//! The hot path: sending one request with hyper's pooled client and turning whatever happens into
//! exactly one [`Outcome`] and one duration. The harness's own limits (connect, whole request) are
//! told apart from the server's failures, so a timeout is never reported as the server's latency.
//! witness's own failures (out of file descriptors or ports) are `local`, never the server's. Bodies
//! are read streaming: the whole body is counted, only a bounded prefix is kept, and a body that
//! stalls after the status keeps the status on the record.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    /// At most this much of a response body is kept in memory (the rest is read and counted).
    pub max_body: usize,
}

/// The default of `--max-body`: a few MiB, plenty for a refusal marker or an error page.
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;

/// What one request came to.
#[derive(Clone, Debug)]
pub struct Sent {
    pub start: Instant,
    pub end: Instant,
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub detail: Option<String>,
    /// Body bytes read (all of them, kept or not), once a status arrived.
    pub body_bytes: Option<u64>,
    /// The body was longer than `Limits::max_body`: counted, not kept.
    pub body_cut: bool,
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
                body_bytes: None,
                body_cut: false,
            }
        }
    };
    // What arrived before a timeout dropped the work: the status, and how much body.
    let seen_status = AtomicU32::new(0);
    let seen_bytes = AtomicU64::new(0);
    let work = async {
        let resp = client.request(req).await.map_err(Failure::Client)?;
        let status = resp.status().as_u16();
        seen_status.store(status as u32, Ordering::Relaxed);
        let (kept, total) = read_body(resp.into_body(), limits.max_body, &seen_bytes)
            .await
            .map_err(|e| Failure::Body(e, status))?;
        Ok::<_, Failure>((status, kept, total))
    };
    let res = tokio::time::timeout(limits.whole, work).await;
    let end = Instant::now();
    let got_status = match seen_status.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s as u16),
    };
    let bytes = got_status.map(|_| seen_bytes.load(Ordering::Relaxed));
    let (outcome, status, detail, body_cut) = match res {
        Err(_) => (
            Outcome::Timeout {
                phase: TimeoutPhase::Request,
                limit_s: limits.whole.as_secs_f64(),
            },
            got_status,
            got_status.map(|s| {
                format!(
                    "status {s} arrived, then the body stalled after {} bytes",
                    bytes.unwrap_or(0)
                )
            }),
            false,
        ),
        Ok(Ok((status, kept, total))) => (
            classify_response(status, &kept, rej),
            Some(status),
            // The server's reason, for the annotations: the start of an error answer's body.
            (status >= 400).then(|| super::outcome::body_start(status, &kept)),
            total > kept.len() as u64,
        ),
        Ok(Err(f)) => {
            let (o, status, d) = f.classify(limits);
            (o, status, Some(d), false)
        }
    };
    Sent {
        start,
        end,
        outcome,
        status,
        detail,
        body_bytes: bytes,
        body_cut,
    }
}

/// Reads a body to its end, keeping at most `max` bytes; returns the kept prefix and the total.
/// `seen` follows the count, so a caller whose timeout drops this still knows how far it got.
pub async fn read_body<B>(
    mut body: B,
    max: usize,
    seen: &AtomicU64,
) -> Result<(Vec<u8>, u64), B::Error>
where
    B: hyper::body::Body + Unpin,
    B::Data: bytes::Buf,
{
    use bytes::Buf;
    let mut kept = Vec::new();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame?.into_data() else {
            continue;
        };
        total += data.remaining() as u64;
        seen.store(total, Ordering::Relaxed);
        let mut room = max.saturating_sub(kept.len());
        while room > 0 && data.has_remaining() {
            let chunk = data.chunk();
            let take = chunk.len().min(room);
            kept.extend_from_slice(&chunk[..take]);
            data.advance(take);
            room -= take;
        }
    }
    Ok((kept, total))
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
                let outcome = if is_local(&e) {
                    Outcome::Error {
                        error: ErrorKind::Local,
                        status: None,
                    }
                } else if e.is_connect() {
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

/// witness's own resources ran out (file descriptors, memory, local ports): its failure, never the
/// server's, whatever phase it happened in.
pub fn is_local(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if let Some(code) = io.raw_os_error() {
                return matches!(
                    code,
                    libc::EMFILE
                        | libc::ENFILE
                        | libc::ENOBUFS
                        | libc::ENOMEM
                        | libc::EADDRNOTAVAIL
                );
            }
            // An io::Error wrapping another error: look inside it.
            if let Some(inner) = io.get_ref() {
                if is_local(inner) {
                    return true;
                }
            }
        }
        cur = c.source();
    }
    false
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_file_descriptors_is_witness_s_own_failure() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(is_local(&emfile));
        let wrapped = std::io::Error::other(emfile);
        assert!(is_local(&wrapped));
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert!(!is_local(&refused));
    }

    #[tokio::test]
    async fn a_body_is_counted_whole_and_kept_only_up_to_the_bound() {
        let body = http_body_util::StreamBody::new(futures_util::stream::iter((0..10).map(|_| {
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![
                7u8;
                1000
            ])))
        })));
        let seen = AtomicU64::new(0);
        let (kept, total) = read_body(body, 2500, &seen).await.unwrap();
        assert_eq!(total, 10_000);
        assert_eq!(kept.len(), 2500);
        assert_eq!(seen.load(Ordering::Relaxed), 10_000);
    }
}
