//! HTTP/2 for the ladder (`--http2`): over TLS, agreed by ALPN, or in cleartext with prior
//! knowledge (h2c). A level of n sends n concurrent streams over the few connections the user asks
//! for (`--connections`, as oha's `-p`): worker w sends its streams on connection w mod c. Each
//! stream is one exchange with one outcome and one duration, as over HTTP/1.1; a connection is
//! opened again once the server closed it (after its GOAWAY), and the stream that opened it carries
//! its connect and handshake phases.
//!
//! A server ends a connection with GOAWAY as part of the protocol (nginx after `keepalive_requests`,
//! 1000 by default): the streams above its last-stream-id were never processed, so they are sent
//! again on a new connection, as h2load and oha do, and so are streams refused with REFUSED_STREAM
//! and requests hyper never wrote because their connection was closing. Such a request is counted
//! once, with one duration from its first sending to its answer (the refusal comes at once, the
//! new connection's connect and handshake are the server's and are on the phases of the stream that
//! opened it; witness waits for nothing of its own). After [`UNPROCESSED_RESENDS`] resends it is an
//! error (`goaway`, `stream_reset`). A stream the server took and then lost (a reset connection, a
//! RST_STREAM other than REFUSED_STREAM, a connection closed under it) is an error at once.
//!
//! How each connection ended is read from the frames the server sends (its GOAWAY's
//! last-stream-id and error code, which hyper does not hand out) or from the connection's own end,
//! and counted per level: [`Pool::connections`] is the level's `connections` event.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;
use hyper::Uri;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::client::{self, Counting, Failure, Limits, Phases, Prepared, Sent};
use super::outcome::Rejection;
use crate::journal::{ConnectionEnds, ErrorKind, Event, UNPROCESSED_RESENDS};

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
    conn: Arc<Conn>,
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
    opened: Arc<AtomicU64>,
    tally: Arc<Tally>,
}

/// How a level's connections ended, and its streams the server did not process: counts only.
#[derive(Default)]
struct Tally {
    /// One entry per way a connection ended (at most [`ENDS_KEPT`]; the rest are `error`).
    ends: Mutex<Vec<ConnectionEnds>>,
    resent: AtomicU64,
    gave_up: AtomicU64,
}

/// Ways of ending kept apart; a server that fails connections in more ways than this has them
/// counted under its last one.
const ENDS_KEPT: usize = 8;

impl Tally {
    fn ended(&self, how: &str, reason: Option<String>, streams: u64) {
        let mut ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        let at = ends
            .iter()
            .position(|e| e.how == how && e.reason == reason)
            .or_else(|| (ends.len() >= ENDS_KEPT).then(|| ends.len() - 1));
        match at {
            Some(i) => {
                let e = &mut ends[i];
                e.connections += 1;
                e.streams_min = e.streams_min.min(streams);
                e.streams_max = e.streams_max.max(streams);
            }
            None => ends.push(ConnectionEnds {
                how: how.into(),
                reason,
                connections: 1,
                streams_min: streams,
                streams_max: streams,
            }),
        }
    }
}

/// One connection, as its driver, its reader and the streams sent on it see it.
struct Conn {
    /// Streams witness opened on it (requests hyper handed back unsent are not).
    sent: AtomicU64,
    /// Its end was counted (once: at its GOAWAY, or when it closed).
    told: AtomicBool,
    /// The error code of a GOAWAY that only warned (last-stream-id 2^31-1, a graceful shutdown's
    /// first), plus one: told when the connection then closes.
    warned: AtomicU32,
    /// Shared while a request is put on the connection's dispatch queue, held alone while the
    /// dispatcher (hyper's, which owns that queue) is dropped. The queue is tokio's unbounded
    /// channel: dropping its receiver drains only the requests fully in it, so one whose putting
    /// the drop cut in two (its thread preempted between taking its place and writing itself
    /// there), and any behind it, would stay in the channel, neither sent nor handed back, for as
    /// long as a sender lives, the waiting worker's own included: that stream waited out witness's
    /// own whole-request limit (tokio-rs/tokio#7714 is the same for a permit's send). With the
    /// gate a request is either in the queue when it closes (handed back, sent again) or finds it
    /// closed (handed back at once).
    queue: RwLock<()>,
    tally: Arc<Tally>,
}

impl Conn {
    /// The server's GOAWAY, read as it arrived.
    fn goaway(&self, g: GoAway) {
        if g.last_stream_id == MAX_STREAM_ID {
            self.warned
                .store(g.code.saturating_add(1), Ordering::Relaxed);
        } else if !self.told.swap(true, Ordering::Relaxed) {
            self.tally
                .ended("goaway", Some(reason_name(g.code)), g.processed());
        }
    }

    /// Sends `req` on the connection: hyper puts it on the dispatch queue in this call, before the
    /// returned future is first polled, so the gate is held over exactly that.
    fn send_request(
        &self,
        sender: &mut SendRequest<Full<Bytes>>,
        req: hyper::Request<Full<Bytes>>,
    ) -> impl std::future::Future<
        Output = Result<
            hyper::Response<hyper::body::Incoming>,
            hyper::client::conn::TrySendError<hyper::Request<Full<Bytes>>>,
        >,
    > + use<> {
        let _open = self.queue.read().unwrap_or_else(|e| e.into_inner());
        sender.try_send_request(req)
    }

    /// The connection's task ended: the server closed it, or it failed.
    fn closed(&self, r: Result<(), hyper::Error>) {
        if self.told.swap(true, Ordering::Relaxed) {
            return;
        }
        let sent = self.sent.load(Ordering::Relaxed);
        match (self.warned.load(Ordering::Relaxed), r) {
            (w, _) if w > 0 => self.tally.ended("goaway", Some(reason_name(w - 1)), sent),
            (_, Ok(())) => self.tally.ended("closed", None, sent),
            (_, Err(e)) => {
                let kind = client::hyper_kind(&e, client::io_kind(&e));
                self.tally.ended("error", Some(kind.to_string()), sent)
            }
        }
    }
}

/// A GOAWAY's error code by its name in RFC 9113 (`NO_ERROR`), or its number.
fn reason_name(code: u32) -> String {
    format!("{:?}", h2::Reason::from(code))
}

impl Pool {
    pub fn new(limits: Limits, connections: u32) -> Self {
        Self {
            connector: client::counted_h2(limits.connect),
            slots: (0..connections.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            opened: Default::default(),
            tally: Default::default(),
        }
    }

    /// How many connections the level opened (more than asked for when the server closed some),
    /// read as it goes.
    pub fn opened_counter(&self) -> Arc<AtomicU64> {
        self.opened.clone()
    }

    /// The level's `connections` event: how its connections ended so far, and its streams sent
    /// again. Read once its workers are done.
    pub fn connections(&self, level: u32) -> Event {
        let mut ends = self
            .tally
            .ends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        ends.sort_by_key(|e| std::cmp::Reverse(e.connections));
        Event::Connections {
            level,
            opened: self.opened.load(Ordering::Relaxed),
            ends,
            resent: self.tally.resent.load(Ordering::Relaxed),
            gave_up: self.tally.gave_up.load(Ordering::Relaxed),
        }
    }

    /// The sender of worker `w`'s connection, opened (its phases into `phases`) if it is closed.
    async fn sender(
        &self,
        w: u32,
        target: &Uri,
        phases: &Phases,
    ) -> Result<(SendRequest<Full<Bytes>>, u64, Arc<Conn>), Failure> {
        let slot = &self.slots[w as usize % self.slots.len()];
        let mut live = slot.lock().await;
        if let Some(l) = live.as_ref() {
            if !l.sender.is_closed() && l.sender.is_ready() {
                return Ok((l.sender.clone(), l.generation, l.conn.clone()));
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
        let conn = Arc::new(Conn {
            sent: AtomicU64::new(0),
            told: AtomicBool::new(false),
            warned: AtomicU32::new(0),
            queue: RwLock::new(()),
            tally: self.tally.clone(),
        });
        let io = Watched {
            io,
            frames: Frames::default(),
            conn: conn.clone(),
        };
        let (sender, driving) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(Failure::Request)?;
        let ends = conn.clone();
        let driver = tokio::spawn(async move {
            // Aborted with the level (the pool) while still open: not an end the server made.
            let mut driving = driving;
            let how = (&mut driving).await;
            // Its dispatch queue closes here, with no request half put on it ([`Conn::queue`]).
            let closing = ends.queue.write().unwrap_or_else(|e| e.into_inner());
            drop(driving);
            drop(closing);
            ends.closed(how);
        });
        let generation = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        *live = Some(Live {
            sender: sender.clone(),
            driver: Some(driver),
            generation,
            conn: conn.clone(),
        });
        Ok((sender, generation, conn))
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

/// Why the server never processed a stream, so that sending it again is safe (RFC 9113 §8.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unprocessed {
    /// hyper handed the request back, or cancelled it before writing it: the connection was
    /// closing (its GOAWAY had arrived) while the stream waited its turn.
    NotSent,
    /// Above the GOAWAY's last-stream-id, or opened after the GOAWAY arrived: its error code.
    GoAway(h2::Reason),
    /// RST_STREAM with REFUSED_STREAM: refused "before processing any application logic".
    Refused,
}

/// What a failed stream's error says, as [`unprocessed`] reads it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Seen {
    /// hyper handed the request back unsent.
    pub returned: bool,
    /// hyper cancelled it before it was written (its dispatch task gone).
    pub canceled: bool,
    /// An HTTP/2 error the server sent: GOAWAY (true) or RST_STREAM (false), with its code.
    pub remote: Option<(bool, h2::Reason)>,
}

impl Seen {
    fn of(returned: bool, e: &hyper::Error) -> Self {
        let mut remote = None;
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cur {
            if let Some(h) = c.downcast_ref::<h2::Error>() {
                if h.is_remote() && (h.is_go_away() || h.is_reset()) {
                    remote = Some((h.is_go_away(), h.reason().unwrap_or(h2::Reason::NO_ERROR)));
                }
                break;
            }
            cur = c.source();
        }
        Self {
            returned,
            canceled: e.is_canceled() || e.to_string().contains("dispatch task is gone"),
            remote,
        }
    }
}

/// Whether the server never processed a failed stream, and why: the retry decision, on what the
/// error says and nothing else. A stream the server took and then lost (a reset connection, a
/// connection closed under it, a RST_STREAM other than REFUSED_STREAM) is not: it failed.
pub(crate) fn unprocessed(seen: Seen) -> Option<Unprocessed> {
    match seen.remote {
        // h2 gives a stream the server's GOAWAY only when it is above the last-stream-id (or was
        // opened after it): one the server took and then lost ends with the connection (an I/O
        // error), whatever code the GOAWAY carried.
        Some((true, code)) => Some(Unprocessed::GoAway(code)),
        Some((false, code)) if code == h2::Reason::REFUSED_STREAM => Some(Unprocessed::Refused),
        Some((false, _)) => None,
        None if seen.returned || seen.canceled => Some(Unprocessed::NotSent),
        None => None,
    }
}

impl Unprocessed {
    /// The request's error once its resends ran out.
    fn failure(self, sendings: u32, first: Instant) -> Failure {
        let (error, what) = match self {
            Unprocessed::GoAway(code) => (
                ErrorKind::Goaway,
                format!("above the last-stream-id of its GOAWAY ({code:?})"),
            ),
            Unprocessed::Refused => (
                ErrorKind::StreamReset,
                "refused with RST_STREAM (REFUSED_STREAM)".to_string(),
            ),
            Unprocessed::NotSent => (
                ErrorKind::Goaway,
                "not written: its connection was closing (the server's GOAWAY)".to_string(),
            ),
        };
        Failure::Said {
            error,
            status: None,
            text: format!(
                "the server did not process this stream, sent {sendings} times over {:.2}s: the last time {what}; witness sends a stream the server did not process again at most {UNPROCESSED_RESENDS} times",
                first.elapsed().as_secs_f64()
            ),
        }
    }
}

/// Sends one request as one stream on worker `w`'s shared connection and records its single
/// outcome: the same outcomes, limits and body handling as [`client::send_on`]. A stream the
/// server did not process is sent again on a new connection (at most [`UNPROCESSED_RESENDS`]
/// times), the request's duration running on from `start`.
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
        let mut resent = 0;
        let resp = loop {
            let (mut sender, g, conn) = pool.sender(w, &req.target, &phases).await?;
            generation = g;
            match conn.send_request(&mut sender, req.request_h2()).await {
                Ok(resp) => {
                    conn.sent.fetch_add(1, Ordering::Relaxed);
                    phases.headers(start);
                    break resp;
                }
                Err(mut e) => {
                    let returned = e.take_message().is_some();
                    if !returned {
                        conn.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    let Some(why) = unprocessed(Seen::of(returned, e.error())) else {
                        return Err(Failure::Request(e.into_error()));
                    };
                    if resent >= UNPROCESSED_RESENDS {
                        pool.tally.gave_up.fetch_add(1, Ordering::Relaxed);
                        return Err(why.failure(resent + 1, start));
                    }
                    resent += 1;
                    pool.tally.resent.fetch_add(1, Ordering::Relaxed);
                    // A refused stream's connection still serves; a closing one takes no more.
                    if why != Unprocessed::Refused {
                        pool.forget(w, g).await;
                    }
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
            error: ErrorKind::Goaway
                | ErrorKind::Reset
                | ErrorKind::ClosedBeforeResponse
                | ErrorKind::Tls,
            ..
        }
    ) {
        pool.forget(w, generation).await;
    }
    (s.connect_s, s.headers_s) = (phases.connect_s(), phases.headers_s());
    s.handshake_s = phases.handshake_s();
    s
}

/// The largest stream id: a GOAWAY carrying it only warns that one with the real last-stream-id
/// follows (a graceful shutdown's first).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// A GOAWAY frame's fixed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GoAway {
    pub last_stream_id: u32,
    pub code: u32,
}

impl GoAway {
    /// The streams the server processed: witness's streams are 1, 3, 5 …, so those at or below
    /// the last-stream-id.
    fn processed(self) -> u64 {
        (self.last_stream_id as u64).div_ceil(2)
    }
}

/// Reads the frames a server sends on an HTTP/2 connection as they pass, for its GOAWAYs: each
/// frame's 9-byte header, and a GOAWAY's last-stream-id and error code; everything else is
/// skipped by count. Nothing is copied or held back.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    state: FrameState,
}

#[derive(Debug)]
enum FrameState {
    Head([u8; 9], usize),
    GoAway([u8; 8], usize, u32),
    Skip(u32),
}

impl Default for FrameState {
    fn default() -> Self {
        FrameState::Head([0; 9], 0)
    }
}

impl Frames {
    /// Reads `b`, the next bytes from the server; `on` gets each GOAWAY as its fixed part arrives.
    pub(crate) fn feed(&mut self, mut b: &[u8], mut on: impl FnMut(GoAway)) {
        while !b.is_empty() {
            match &mut self.state {
                FrameState::Head(head, have) => {
                    let take = (9 - *have).min(b.len());
                    head[*have..*have + take].copy_from_slice(&b[..take]);
                    *have += take;
                    b = &b[take..];
                    if *have == 9 {
                        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]);
                        self.state = match head[3] {
                            7 if len >= 8 => FrameState::GoAway([0; 8], 0, len - 8),
                            _ => FrameState::Skip(len),
                        };
                    }
                }
                FrameState::GoAway(fixed, have, rest) => {
                    let take = (8 - *have).min(b.len());
                    fixed[*have..*have + take].copy_from_slice(&b[..take]);
                    *have += take;
                    b = &b[take..];
                    if *have == 8 {
                        let [a, b2, c, d, e, f, g, h] = *fixed;
                        on(GoAway {
                            last_stream_id: u32::from_be_bytes([a, b2, c, d]) & MAX_STREAM_ID,
                            code: u32::from_be_bytes([e, f, g, h]),
                        });
                        self.state = FrameState::Skip(*rest);
                    }
                }
                FrameState::Skip(n) => {
                    let take = (*n as usize).min(b.len());
                    *n -= take as u32;
                    b = &b[take..];
                }
            }
            if matches!(self.state, FrameState::Skip(0)) {
                self.state = FrameState::default();
            }
        }
        if matches!(self.state, FrameState::Skip(0)) {
            self.state = FrameState::default();
        }
    }
}

/// A connection's I/O with the server's frames read as they pass ([`Frames`]).
struct Watched<T> {
    io: T,
    frames: Frames,
    conn: Arc<Conn>,
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Watched<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        // SAFETY: the cursor's unfilled part goes to the inner reader as a ReadBuf, which only
        // ever writes initialised bytes into it; the cursor then advances over exactly the bytes
        // that reader filled.
        let n = unsafe {
            let mut read = hyper::rt::ReadBuf::uninit(buf.as_mut());
            match std::pin::Pin::new(&mut this.io).poll_read(cx, read.unfilled()) {
                std::task::Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let conn = &this.conn;
            this.frames.feed(read.filled(), |g| conn.goaway(g));
            read.filled().len()
        };
        unsafe { buf.advance(n) };
        std::task::Poll::Ready(Ok(()))
    }
}

super::write_through!(Watched);

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.push(kind);
        f.push(0);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn goaway(last: u32, code: u32, debug: &[u8]) -> Vec<u8> {
        let mut p = last.to_be_bytes().to_vec();
        p.extend_from_slice(&code.to_be_bytes());
        p.extend_from_slice(debug);
        frame(7, 0, &p)
    }

    /// What a server sends: SETTINGS, HEADERS and DATA of a few streams, a GOAWAY with debug
    /// data, a PING; then a second GOAWAY.
    fn conversation() -> Vec<u8> {
        [
            frame(4, 0, &[0, 3, 0, 0, 0, 128]),
            frame(1, 1, &[0x88]),
            frame(0, 1, b"ok\n"),
            frame(7, 3, &[1, 2, 3]), // type 7 but too short to be a GOAWAY's fixed part
            frame(0, 3, &[0; 20_000]),
            goaway(1999, 0, b"keepalive_requests"),
            frame(6, 0, &[0; 8]),
            goaway((1 << 31) | 5, 11, b""),
        ]
        .concat()
    }

    fn read(chunks: &[&[u8]]) -> Vec<GoAway> {
        let mut f = Frames::default();
        let mut seen = Vec::new();
        for c in chunks {
            f.feed(c, |g| seen.push(g));
        }
        seen
    }

    #[test]
    fn a_goaway_is_read_from_the_server_s_frames_however_the_reads_cut_them() {
        let all = conversation();
        let want = vec![
            GoAway {
                last_stream_id: 1999,
                code: 0,
            },
            // The reserved bit is not part of the id.
            GoAway {
                last_stream_id: 5,
                code: 11,
            },
        ];
        assert_eq!(read(&[&all]), want);
        // Byte by byte, and cut at every place in two.
        let bytes: Vec<&[u8]> = all.chunks(1).collect();
        assert_eq!(read(&bytes), want);
        for cut in 0..all.len() {
            let (a, b) = all.split_at(cut);
            assert_eq!(read(&[a, b]), want, "cut at {cut}");
        }
        assert_eq!(want[0].processed(), 1000);
        assert_eq!(
            GoAway {
                last_stream_id: 0,
                code: 0
            }
            .processed(),
            0
        );
        assert_eq!(reason_name(0), "NO_ERROR");
        assert_eq!(reason_name(11), "ENHANCE_YOUR_CALM");
    }

    #[test]
    fn only_a_stream_the_server_never_processed_is_sent_again() {
        let remote = |goaway, code| Seen {
            remote: Some((goaway, code)),
            ..Seen::default()
        };
        // Above the GOAWAY's last-stream-id, whatever its code: the server did nothing with it.
        assert_eq!(
            unprocessed(remote(true, h2::Reason::NO_ERROR)),
            Some(Unprocessed::GoAway(h2::Reason::NO_ERROR))
        );
        assert_eq!(
            unprocessed(remote(true, h2::Reason::ENHANCE_YOUR_CALM)),
            Some(Unprocessed::GoAway(h2::Reason::ENHANCE_YOUR_CALM))
        );
        assert_eq!(
            unprocessed(remote(false, h2::Reason::REFUSED_STREAM)),
            Some(Unprocessed::Refused)
        );
        // Handed back or cancelled before it was written.
        for seen in [
            Seen {
                returned: true,
                ..Seen::default()
            },
            Seen {
                canceled: true,
                ..Seen::default()
            },
        ] {
            assert_eq!(unprocessed(seen), Some(Unprocessed::NotSent));
        }
        // Taken and then lost: reset by the server, or its connection gone under it.
        assert_eq!(unprocessed(remote(false, h2::Reason::INTERNAL_ERROR)), None);
        assert_eq!(unprocessed(remote(false, h2::Reason::CANCEL)), None);
        assert_eq!(unprocessed(Seen::default()), None);
    }

    #[test]
    fn connection_ends_are_counted_by_way_in_bounded_memory() {
        let t = Tally::default();
        for s in [1000, 1000, 998] {
            t.ended("goaway", Some("NO_ERROR".into()), s);
        }
        t.ended("closed", None, 12);
        for i in 0..100 {
            t.ended("error", Some(format!("kind {i}")), i);
        }
        let ends = t.ends.lock().unwrap();
        assert_eq!(ends.len(), ENDS_KEPT);
        assert_eq!(
            (
                ends[0].connections,
                ends[0].streams_min,
                ends[0].streams_max
            ),
            (3, 998, 1000)
        );
        assert_eq!(ends[1].how, "closed");
        assert_eq!(ends.iter().map(|e| e.connections).sum::<u64>(), 104);
    }
}
