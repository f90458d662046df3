//! Health probes: a plain GET with its own short limit, on a fresh connection (never the load's pool,
//! so a wedged pooled connection cannot make a healthy server look dead, or the reverse).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::journal::{Event, Journal, Probe};

pub struct Prober {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    pub url: Uri,
    limit: Duration,
}

impl Prober {
    pub fn new(url: Uri, limit: Duration) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(super::client::connector(limit));
        Self { client, url, limit }
    }

    pub async fn probe(&self) -> Probe {
        let start = Instant::now();
        let work = async {
            let resp = self.client.get(self.url.clone()).await?;
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
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
