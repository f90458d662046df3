//! Health probes: a plain GET with its own short limit, on witness's own connection (never the load's
//! pool, so a wedged pooled connection cannot make a healthy server look dead, or the reverse). The
//! probes share one kept-alive connection, so a server limited to a few connections spends one on
//! witness, not one per probe; a probe that fails on that connection (the server closed it, or
//! restarted) is tried once more on a fresh one. Before a level that connection is closed — and
//! the server seen letting go of it — so level n holds n connections to the server, not n + 1.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::Uri;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{counted, Counted, Counting};
use crate::journal::{Event, Journal, Probe};

/// A health probe reads at most this much of a body before it stops (the connection is not reused).
const PROBE_BODY: usize = 64 * 1024;

/// How long closing the probe's connection waits for the server to close its end too.
const LINGER: Duration = Duration::from_millis(200);

type Io = super::client::Io;

/// The probes' one kept-alive connection.
struct Kept {
    sender: Sender,
    /// Drives the connection; gives the socket back once the sender is dropped, to be closed
    /// gracefully.
    driver: tokio::task::JoinHandle<Option<Counted<Io>>>,
}

/// Drops a connection that failed or holds a half-read answer, closing it now (a wedged server
/// would otherwise keep it, and witness's count, open).
fn discard(kept: &mut Option<Kept>) {
    if let Some(k) = kept.take() {
        k.driver.abort();
    }
}

/// The probe's connection speaks HTTP/1.1, or HTTP/2 with prior knowledge where the server speaks
/// nothing else (`--http2` on an http:// URL).
enum Sender {
    H1(SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl Sender {
    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    async fn send(
        &mut self,
        mut req: hyper::Request<Empty<Bytes>>,
        url: &Uri,
    ) -> hyper::Result<hyper::Response<hyper::body::Incoming>> {
        match self {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => {
                *req.uri_mut() = url.clone();
                req.headers_mut().remove(hyper::header::HOST);
                s.send_request(req).await
            }
        }
    }
}

pub struct Prober {
    connector: Counting,
    /// HTTP/2 with prior knowledge (h2c).
    h2c: bool,
    /// The question is a TCP connect to the URL's host and port, no request (a server with no
    /// health endpoint whose URL is not for GET).
    connect_only: bool,
    kept: tokio::sync::Mutex<Option<Kept>>,
    pub url: Uri,
    limit: Duration,
}

impl Prober {
    pub fn new(url: Uri, limit: Duration) -> Self {
        Self {
            connector: counted(limit),
            h2c: false,
            connect_only: false,
            kept: tokio::sync::Mutex::new(None),
            url,
            limit,
        }
    }

    /// Probes with HTTP/2 prior knowledge on an http:// URL (a server that speaks only h2c).
    pub fn h2c(mut self, on: bool) -> Self {
        self.h2c = on && self.url.scheme_str() == Some("http");
        self
    }

    /// Asks only whether a TCP connection to the URL's host and port opens (and closes it).
    pub fn connect_only(mut self) -> Self {
        self.connect_only = true;
        self
    }

    /// What is asked, as the journal and messages name it: the URL, or "a TCP connect to H:P".
    pub fn describe(&self) -> String {
        if self.connect_only {
            format!(
                "a TCP connect to {}:{}",
                self.url.host().unwrap_or(""),
                super::tls::port(&self.url)
            )
        } else {
            self.url.to_string()
        }
    }

    pub async fn probe(&self) -> Probe {
        if self.connect_only {
            return self.connect_once().await;
        }
        let p = self.probe_once().await;
        if p.status.is_none() && p.error.as_deref() != Some("TimeoutError") {
            // The kept-alive connection may have died with a server that restarted: one fresh try.
            return self.probe_once().await;
        }
        p
    }

    /// Closes the probes' connection and waits (briefly) for the server to close its end, so the
    /// server no longer counts it when the level's workers connect. The next probe opens a new one.
    pub async fn close(&self) {
        let Some(k) = self.kept.lock().await.take() else {
            return;
        };
        drop(k.sender);
        let mut driver = k.driver;
        let io = match tokio::time::timeout(LINGER, &mut driver).await {
            Ok(Ok(io)) => io,
            _ => {
                driver.abort();
                None
            }
        };
        if let Some(mut io) = io {
            let tcp = io.tcp();
            let _ = tokio::time::timeout(LINGER, async {
                tcp.shutdown().await?;
                let mut buf = [0u8; 1024];
                while tcp.read(&mut buf).await? > 0 {}
                Ok::<_, std::io::Error>(())
            })
            .await;
        }
    }

    /// The kept-alive connection, or a new one.
    async fn ready<'a>(
        &self,
        kept: &'a mut Option<Kept>,
    ) -> Result<&'a mut Sender, Box<dyn std::error::Error + Send + Sync>> {
        let alive = match kept.as_mut() {
            Some(k) => k.sender.ready().await.is_ok(),
            None => false,
        };
        if !alive {
            discard(kept);
            let mut c = self.connector.clone();
            let io = tower_service::Service::call(&mut c, self.url.clone()).await?;
            let (mut sender, driver) = if self.h2c {
                let (sender, conn) =
                    hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .handshake(io)
                        .await?;
                let driver = tokio::spawn(async move {
                    let _ = conn.await;
                    None
                });
                (Sender::H2(sender), driver)
            } else {
                let (sender, conn) = hyper::client::conn::http1::handshake(io).await?;
                let driver =
                    tokio::spawn(async move { conn.without_shutdown().await.ok().map(|p| p.io) });
                (Sender::H1(sender), driver)
            };
            sender.ready().await?;
            *kept = Some(Kept { sender, driver });
        }
        Ok(&mut kept.as_mut().expect("just made").sender)
    }

    async fn connect_once(&self) -> Probe {
        let start = Instant::now();
        let host = self
            .url
            .host()
            .unwrap_or("")
            .trim_matches(['[', ']'])
            .to_string();
        let port = super::tls::port(&self.url);
        // To the addresses resolved once for the run: a lookup is never inside the probe's limit.
        let work = async {
            let addrs: Vec<std::net::SocketAddr> = super::resolve::addrs(&host)
                .await
                .map_err(std::io::Error::other)?
                .into_iter()
                .map(|ip| std::net::SocketAddr::new(ip, port))
                .collect();
            tokio::net::TcpStream::connect(&addrs[..]).await
        };
        let error = match tokio::time::timeout(self.limit, work).await {
            Err(_) => Some("TimeoutError".to_string()),
            Ok(Ok(s)) => {
                drop(s);
                None
            }
            Ok(Err(e)) => Some(error_name(&e)),
        };
        Probe {
            status: None,
            connected: error.is_none(),
            error,
            duration_s: start.elapsed().as_secs_f64(),
        }
    }

    async fn probe_once(&self) -> Probe {
        let start = Instant::now();
        let mut kept = self.kept.lock().await;
        let work = async {
            let sender = self.ready(&mut kept).await?;
            let mut req = hyper::Request::new(Empty::<Bytes>::new());
            super::client::origin_form(&mut req, &self.url);
            let resp = sender.send(req, &self.url).await?;
            let status = resp.status().as_u16();
            // Only the status matters: read at most a little of the body, never a whole huge one.
            let mut body = resp.into_body();
            let mut read = 0usize;
            let mut whole = false;
            while read < PROBE_BODY {
                match body.frame().await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
                    Some(Err(_)) => break,
                    None => {
                        whole = true;
                        break;
                    }
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, whole))
        };
        let (status, error) = match tokio::time::timeout(self.limit, work).await {
            Err(_) => (None, Some("TimeoutError".to_string())),
            Ok(Ok((s, whole))) => {
                if !whole {
                    // A body left half read: that connection is nobody's any more.
                    discard(&mut kept);
                }
                (Some(s), None)
            }
            Ok(Err(e)) => (None, Some(error_name(&*e))),
        };
        if status.is_none() {
            discard(&mut kept);
        }
        Probe {
            status,
            error,
            duration_s: start.elapsed().as_secs_f64(),
            connected: false,
        }
    }

    /// Probes and journals it with its purpose.
    pub async fn probe_journalled(&self, journal: &Journal, purpose: &str) -> Probe {
        let p = self.probe().await;
        journal.emit(Event::Health {
            url: self.describe(),
            purpose: purpose.into(),
            probe: p.clone(),
        });
        p
    }
}

/// A short name for why a probe failed, as the report shows it.
fn error_name(e: &(dyn std::error::Error + 'static)) -> String {
    if super::tls::untrusted(e).is_some() {
        return "TlsCertificate".into();
    }
    if super::tls::is_tls(e) {
        return "TlsError".into();
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "ConnectionRefused".into(),
                std::io::ErrorKind::ConnectionReset => "ConnectionReset".into(),
                std::io::ErrorKind::TimedOut => "TimeoutError".into(),
                k => format!("{k:?}"),
            };
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() {
                return "ClosedBeforeResponse".into();
            }
            if h.is_parse() {
                return "ProtocolError".into();
            }
        }
        cur = c.source();
    }
    "ConnectError".into()
}

/// Health, however the server is asked: an HTTP GET, or MCP's `ping`.
// One per run: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Health {
    Http(Prober),
    Mcp(super::mcp::Pinger),
}

impl Health {
    pub async fn probe(&self) -> Probe {
        match self {
            Health::Http(p) => p.probe().await,
            Health::Mcp(p) => p.probe().await,
        }
    }

    /// Lets go of the probe's connection to the server (before a level); the next probe opens one.
    pub async fn close(&self) {
        match self {
            Health::Http(p) => p.close().await,
            Health::Mcp(p) => p.close().await,
        }
    }

    /// What is probed, as the journal and messages name it.
    pub fn describe(&self) -> String {
        match self {
            Health::Http(p) => Prober::describe(p),
            Health::Mcp(p) => p.describe(),
        }
    }

    /// Probes and journals it with its purpose.
    pub async fn probe_journalled(&self, journal: &Journal, purpose: &str) -> Probe {
        match self {
            Health::Http(p) => p.probe_journalled(journal, purpose).await,
            Health::Mcp(m) => {
                let p = m.probe().await;
                journal.emit(Event::Health {
                    url: m.describe(),
                    purpose: purpose.into(),
                    probe: p.clone(),
                });
                p
            }
        }
    }
}

/// Anything that can say whether the server is healthy (waiting for ready takes either).
pub trait Probes {
    fn probe(&self) -> impl std::future::Future<Output = Probe> + Send;
    fn describe(&self) -> String;
}

impl Probes for Prober {
    async fn probe(&self) -> Probe {
        Prober::probe(self).await
    }
    fn describe(&self) -> String {
        Prober::describe(self)
    }
}

impl Probes for Health {
    async fn probe(&self) -> Probe {
        Health::probe(self).await
    }
    fn describe(&self) -> String {
        Health::describe(self)
    }
}
