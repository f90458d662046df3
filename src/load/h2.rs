//! HTTP/2 for the ladder (`--http2`): over TLS, agreed by ALPN, or in cleartext with prior
//! knowledge (h2c). A level of n sends n concurrent streams over the few connections the user asks
//! for (`--connections`, as oha's `-p`): worker w sends its streams on connection w mod c. Each
//! stream is one exchange with one outcome and one duration, as over HTTP/1.1; a connection is
//! opened again once the server closed it (after its GOAWAY), and the stream that opened it carries
//! its connect and handshake phases. A stream the server refused by GOAWAY, or reset by
//! RST_STREAM, is an error of its own kind (`goaway`, `stream_reset`) with the server's reason.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;
use hyper::Uri;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::client::{self, Counting, Failure, Limits, Phases, Prepared, Sent};
use super::outcome::Rejection;

/// What a level's connections spoke, for its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spoke {
    /// HTTP/2 over TLS, agreed by ALPN.
    Tls,
    /// HTTP/2 in cleartext, with prior knowledge.
    Cleartext,
}

impl Spoke {
    pub fn words(self) -> &'static str {
        match self {
            Spoke::Tls => "HTTP/2 over TLS (ALPN h2)",
            Spoke::Cleartext => "HTTP/2 cleartext (h2c, prior knowledge)",
        }
    }
}

struct Live {
    sender: SendRequest<Full<Bytes>>,
    /// Drives the connection; ended with the level (the pool), never while other workers' streams
    /// are still in flight on it.
    driver: Option<tokio::task::JoinHandle<()>>,
    /// Which opening of its slot this is: a failure closes only the connection it happened on.
    generation: u64,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(d) = self.driver.take() {
            d.abort();
        }
    }
}

/// A level's HTTP/2 connections, shared by its workers.
pub struct Pool {
    connector: Counting,
    slots: Vec<tokio::sync::Mutex<Option<Live>>>,
    opened: std::sync::Arc<AtomicU64>,
}

impl Pool {
    pub fn new(limits: Limits, connections: u32) -> Self {
        Self {
            connector: client::counted_h2(limits.connect),
            slots: (0..connections.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            opened: Default::default(),
        }
    }

    /// How many connections the level opened (more than asked for when the server closed some),
    /// read as it goes.
    pub fn opened_counter(&self) -> std::sync::Arc<AtomicU64> {
        self.opened.clone()
    }

    /// The sender of worker `w`'s connection, opened (its phases into `phases`) if it is closed.
    async fn sender(
        &self,
        w: u32,
        target: &Uri,
        phases: &Phases,
    ) -> Result<(SendRequest<Full<Bytes>>, u64), Failure> {
        let slot = &self.slots[w as usize % self.slots.len()];
        let mut live = slot.lock().await;
        if let Some(l) = live.as_ref() {
            if !l.sender.is_closed() && l.sender.is_ready() {
                return Ok((l.sender.clone(), l.generation));
            }
        }
        // A connection that takes no new streams (the server's GOAWAY) may still be finishing
        // other workers' streams: left to end on its own.
        if let Some(mut old) = live.take() {
            drop(old.driver.take());
        }
        let mut c = self.connector.clone();
        let io = tower_service::Service::call(&mut c, target.clone())
            .await
            .map_err(Failure::Connect)?;
        phases.opened(&io);
        if target.scheme_str() == Some("https") && !io.h2() {
            return Err(Failure::Connect(
                "the server did not agree to HTTP/2 by ALPN (it answers HTTP/1.1 only): run without --http2, or enable HTTP/2 on the server"
                    .into(),
            ));
        }
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(Failure::Request)?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let generation = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        *live = Some(Live {
            sender: sender.clone(),
            driver: Some(driver),
            generation,
        });
        Ok((sender, generation))
    }

    /// Forgets worker `w`'s connection if it is still the one of `generation` (a stream on it
    /// failed in a way that leaves it unusable).
    async fn forget(&self, w: u32, generation: u64) {
        let slot = &self.slots[w as usize % self.slots.len()];
        let mut live = slot.lock().await;
        if live.as_ref().is_some_and(|l| l.generation == generation) {
            // The next stream opens a new connection; this one is left to finish the streams other
            // workers have in flight on it (its task ends when the server closes it).
            if let Some(mut old) = live.take() {
                drop(old.driver.take());
            }
        }
    }
}

/// Sends one request as one stream on worker `w`'s shared connection and records its single
/// outcome: the same outcomes, limits and body handling as [`client::send_on`].
pub async fn send(
    pool: &Pool,
    w: u32,
    req: &Prepared,
    limits: Limits,
    rej: &Rejection,
    start: Instant,
) -> Sent {
    let seen_status = std::sync::atomic::AtomicU32::new(0);
    let seen_bytes = AtomicU64::new(0);
    let phases = Phases::default();
    let mut generation = 0;
    let work = async {
        let mut retried = false;
        let resp = loop {
            let (mut sender, g) = pool.sender(w, &req.target, &phases).await?;
            generation = g;
            match sender.try_send_request(req.request_h2()).await {
                Ok(resp) => {
                    phases.headers(start);
                    break resp;
                }
                Err(mut e) => {
                    // Not sent: the connection closed between the check and the send, or while the
                    // stream waited for the server's stream limit (the server's GOAWAY had
                    // arrived: hyper cancels what it had not written, or drops it with its
                    // dispatch task). The server never saw it: sent again on a new one, once.
                    let back = e.take_message().is_some();
                    let unsent = back
                        || e.error().is_canceled()
                        || e.error().to_string().contains("dispatch task is gone");
                    if unsent && !retried {
                        retried = true;
                        pool.forget(w, g).await;
                        continue;
                    }
                    return Err(Failure::Request(e.into_error()));
                }
            }
        };
        client::take_response(resp, limits, &seen_status, &seen_bytes).await
    };
    let res = tokio::time::timeout(limits.whole, work).await;
    let end = Instant::now();
    let mut s = client::finish(start, end, res, &seen_status, &seen_bytes, limits, rej);
    if matches!(
        s.outcome,
        crate::journal::Outcome::Error {
            error: crate::journal::ErrorKind::Goaway
                | crate::journal::ErrorKind::Reset
                | crate::journal::ErrorKind::ClosedBeforeResponse
                | crate::journal::ErrorKind::Tls,
            ..
        }
    ) {
        pool.forget(w, generation).await;
    }
    (s.connect_s, s.headers_s) = (phases.connect_s(), phases.headers_s());
    s.handshake_s = phases.handshake_s();
    s
}
