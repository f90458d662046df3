//! Health probes: a plain GET with its own short limit, on witness's own connection (never the load's
//! pool, so a wedged pooled connection cannot make a healthy server look dead, or the reverse). The
//! probes share one kept-alive connection, so a server limited to a few connections spends one on
//! witness, not one per probe; a probe that fails on that connection (the server closed it, or
//! restarted) is tried once more on a fresh one.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::journal::{Event, Journal, Probe};

/// A health probe reads at most this much of a body before it stops (the connection is not reused).
const PROBE_BODY: usize = 64 * 1024;

pub struct Prober {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    pub url: Uri,
    limit: Duration,
}

impl Prober {
    pub fn new(url: Uri, limit: Duration) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build(super::client::connector(limit));
        Self { client, url, limit }
    }

    pub async fn probe(&self) -> Probe {
        let p = self.probe_once().await;
        if p.status.is_none() && p.error.as_deref() != Some("TimeoutError") {
            // The kept-alive connection may have died with a server that restarted: one fresh try.
            return self.probe_once().await;
        }
        p
    }

    async fn probe_once(&self) -> Probe {
        let start = Instant::now();
        let work = async {
            let resp = self.client.get(self.url.clone()).await?;
            let status = resp.status().as_u16();
            // Only the status matters: read at most a little of the body, never a whole huge one.
            let mut body = resp.into_body();
            let mut read = 0usize;
            while read < PROBE_BODY {
                match body.frame().await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
                    _ => break,
                }
            }
            Ok::<_, hyper_util::client::legacy::Error>(status)
        };
        let (status, error) = match tokio::time::timeout(self.limit, work).await {
            Err(_) => (None, Some("TimeoutError".to_string())),
            Ok(Ok(s)) => (Some(s), None),
            Ok(Err(e)) => (None, Some(error_name(&e))),
        };
        Probe {
            status,
            error,
            duration_s: start.elapsed().as_secs_f64(),
        }
    }

    /// Probes and journals it with its purpose.
    pub async fn probe_journalled(&self, journal: &Journal, purpose: &str) -> Probe {
        let p = self.probe().await;
        journal.emit(Event::Health {
            url: self.url.to_string(),
            purpose: purpose.into(),
            probe: p.clone(),
        });
        p
    }
}

/// A short name for why a probe failed, as the report shows it.
fn error_name(e: &(dyn std::error::Error + 'static)) -> String {
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

    /// What is probed, as the journal and messages name it.
    pub fn describe(&self) -> String {
        match self {
            Health::Http(p) => p.url.to_string(),
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
        self.url.to_string()
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
