//! The soak's health question, asked while waiting for ready, at every interval's invariant and
//! when a fault's server is seen back: a GET of the plan's health URL (2xx wanted), or MCP `ping`
//! (an answer is healthy) over the server's stdio or its own streamable HTTP session, never one of
//! the workers'. A plan mixing HTTP and MCP kinds that names no health URL asks `/health`, and
//! gives it up for `ping` when it answers 404 while the server starts (it has no such endpoint);
//! once the server was ready the question never changes, so a later 404 is unhealthy like any
//! other status.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::journal::{secs, Event, Journal, Probe};
use crate::load::client::Limits;
use crate::load::health::{Prober, Probes};
use crate::load::mcp::{McpTarget, Pinger, ToolCall};

use super::plan::{HealthCheck, PingAt, SoakPlan};

pub struct SoakHealth {
    url: Option<Prober>,
    ping: Option<Pinger>,
    /// `ping` is what is asked now: from the start, or since the URL answered 404.
    pinging: AtomicBool,
    /// The URL may still be given up for `ping` (only until the server is first seen ready).
    may_switch: AtomicBool,
    limit: Duration,
    journal: Journal,
}

impl SoakHealth {
    /// `stdio`: the server's pipes, for a stdio plan (its ping shares them with the calls).
    pub fn new(plan: &SoakPlan, stdio: Option<&McpTarget>, journal: &Journal) -> Self {
        let limit = plan.check_timeout;
        let pinger = |at: &PingAt| {
            let (target, headers) = match at {
                PingAt::Http { uri, headers } => (McpTarget::Http(uri.clone()), headers.clone()),
                PingAt::Stdio => (stdio.cloned()?, Default::default()),
            };
            let call = ToolCall {
                tool: String::new(),
                arguments: serde_json::json!({}),
                limits: Limits {
                    connect: plan.limits.connect.min(limit),
                    whole: limit,
                    max_body: plan.limits.max_body,
                },
                rejection: plan.rejection.clone(),
                modern: None,
                headers,
                http2: false,
            };
            Some(Pinger::new(target, call, limit))
        };
        let (url, ping) = match &plan.health {
            HealthCheck::Url(u) => (Some(u.clone()), None),
            HealthCheck::Ping(at) => (None, pinger(at)),
            HealthCheck::UrlOrPing(u, at) => (Some(u.clone()), pinger(at)),
        };
        Self {
            pinging: AtomicBool::new(url.is_none()),
            may_switch: AtomicBool::new(url.is_some() && ping.is_some()),
            url: url.map(|u| Prober::new(u, limit)),
            ping,
            limit,
            journal: journal.clone(),
        }
    }

    /// The server was ready (or, attached, answered once): the question is settled for the run.
    pub fn settle(&self) {
        self.may_switch.store(false, Ordering::SeqCst);
    }

    /// Whether the question is still open: the URL has not been seen answering yet.
    pub fn unsettled(&self) -> bool {
        self.may_switch.load(Ordering::SeqCst)
    }

    pub fn is_ping(&self) -> bool {
        self.pinging.load(Ordering::SeqCst)
    }

    /// One probe, and why it failed in words when it was a ping that failed.
    pub async fn probe_with_reason(&self) -> (Probe, Option<String>) {
        if !self.is_ping() {
            if let Some(url) = &self.url {
                let p = url.probe().await;
                if !(p.status == Some(404) && self.unsettled()) {
                    return (p, None);
                }
                self.pinging.store(true, Ordering::SeqCst);
                self.settle();
                self.journal.emit(Event::Note {
                    level: "info".into(),
                    text: format!(
                        "GET {} answered 404: the server has no such endpoint, so its health is {} for the rest of the soak",
                        url.url,
                        self.describe()
                    ),
                });
            }
        }
        match &self.ping {
            Some(p) => p.probe_with_reason().await,
            // Never built that way: a stdio plan always comes with its pipes.
            None => (
                Probe {
                    status: None,
                    error: Some("ConnectError".into()),
                    duration_s: 0.0,
                    connected: false,
                },
                Some("no MCP connection to ping".into()),
            ),
        }
    }

    /// A probe journalled as `health` with its purpose (and the reason a ping failed).
    pub async fn probe_journalled(&self, purpose: &str) -> (Probe, Option<String>) {
        let (p, why) = self.probe_with_reason().await;
        self.journal.emit(Event::Health {
            url: self.describe(),
            purpose: purpose.into(),
            probe: p.clone(),
        });
        (p, why)
    }

    /// What is asked now, as the journal and messages name it.
    pub fn describe(&self) -> String {
        match (&self.ping, &self.url) {
            (Some(p), _) if self.is_ping() => p.describe(),
            (_, Some(u)) => u.url.to_string(),
            (Some(p), None) => p.describe(),
            (None, None) => "no health question".into(),
        }
    }

    /// The health invariant's detail: "/health answered 500", "mcp ping (stdio) answered", "mcp
    /// ping (stdio) failed: pid 7's stdout closed before the answer (the server exited?)".
    pub fn words(&self, p: &Probe, why: Option<&str>) -> String {
        if !self.is_ping() {
            let path = self.url.as_ref().map(|u| u.url.path()).unwrap_or("/health");
            return format!("{path} answered {}", p.text());
        }
        if p.healthy() {
            return format!("{} answered", self.describe());
        }
        let why = match why {
            Some(w) => w.to_string(),
            None if p.error.as_deref() == Some("TimeoutError") => format!(
                "no answer within check_timeout {}",
                secs(self.limit.as_secs_f64())
            ),
            None => p.text(),
        };
        format!("{} failed: {why}", self.describe())
    }
}

impl Probes for SoakHealth {
    async fn probe(&self) -> Probe {
        self.probe_with_reason().await.0
    }
    fn describe(&self) -> String {
        SoakHealth::describe(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU16;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A real HTTP server on loopback: `/health` answers `status`, `/mcp` answers every JSON-RPC
    /// request with a result (initialize, ping), as a streamable HTTP MCP server would.
    async fn server(status: Arc<AtomicU16>) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let status = status.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let (head, body) = loop {
                        let Ok(n) = s.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..at]).to_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= at + 4 + len {
                            break (head, buf[at + 4..at + 4 + len].to_vec());
                        }
                    };
                    let (code, text) = if head.starts_with("get /health") {
                        (status.load(Ordering::SeqCst), String::new())
                    } else {
                        let msg: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        match msg.get("id") {
                            Some(id) => (
                                200,
                                serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                                    "protocolVersion": "2025-11-25", "capabilities": {},
                                    "serverInfo": {"name": "t", "version": "0"}}})
                                .to_string(),
                            ),
                            None => (202, String::new()),
                        }
                    };
                    let reply = format!(
                        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        port
    }

    fn mixed_plan(port: u16) -> SoakPlan {
        let src = format!(
            "duration = \"1s\"\ncheck_timeout = \"2s\"\n[target]\nbase_url = \"http://127.0.0.1:{port}\"\n[kinds.stats]\npath = \"/stats\"\n[kinds.search]\nmcp = \"search\"\npath = \"/mcp\"\n[[drivers]]\n"
        );
        let f = std::path::Path::new("p.toml");
        let p = super::super::plan::parse(&src, f).unwrap();
        super::super::plan::resolve(
            p,
            &src,
            f,
            &Default::default(),
            &super::super::plan::RealSecrets,
        )
        .unwrap()
    }

    fn journal(tag: &str) -> Journal {
        let dir =
            std::env::temp_dir().join(format!("witness-soak-health-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Journal::create(
            &dir.join("j.jsonl"),
            &crate::journal::Header::new("soak", vec![]),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_404_from_health_while_the_server_starts_turns_to_ping_and_says_so() {
        let status = Arc::new(AtomicU16::new(404));
        let port = server(status.clone()).await;
        let j = journal("switch");
        let h = SoakHealth::new(&mixed_plan(port), None, &j);
        assert!(!h.is_ping() && h.unsettled());
        let (p, _) = h.probe_with_reason().await;
        assert!(p.healthy(), "{p:?}");
        assert!(h.is_ping());
        assert_eq!(
            h.describe(),
            format!("mcp ping http://127.0.0.1:{port}/mcp")
        );
        assert_eq!(
            h.words(&p, None),
            format!("mcp ping http://127.0.0.1:{port}/mcp answered")
        );
        let said = j.lifecycle().into_iter().any(|r| matches!(&r.event,
            Event::Note { text, .. } if text.contains("answered 404: the server has no such endpoint")));
        assert!(said, "the switch is journalled");
    }

    #[tokio::test]
    async fn once_ready_the_question_stays_and_a_later_404_is_unhealthy() {
        let status = Arc::new(AtomicU16::new(200));
        let port = server(status.clone()).await;
        let h = SoakHealth::new(&mixed_plan(port), None, &journal("settled"));
        assert!(h.probe_with_reason().await.0.healthy());
        h.settle();
        status.store(404, Ordering::SeqCst);
        let (p, _) = h.probe_with_reason().await;
        assert_eq!(p.status, Some(404));
        assert!(!h.is_ping());
        assert_eq!(h.words(&p, None), "/health answered 404");
    }
}
