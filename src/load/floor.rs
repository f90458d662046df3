//! The connect floor: before any level, time plain TCP connects to the target, through the very
//! connector the load client uses. If the median exceeds `--max-connect-floor`, every latency would
//! carry the harness's own connect cost (`localhost` resolving to ::1 first: the soak whose every request waited ~2 s for the IPv6 connect), so
//! witness refuses to run. For a host name, every resolved address is timed too, to name the fix.
//! The name was resolved once before ([`super::resolve`]): no lookup is inside any connect timed here.
//! Over https each connect is followed by a TLS handshake, timed apart (the floor of the handshake
//! phase), and a certificate witness does not trust is found here, before any load.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hyper::Uri;
use tower_service::Service;

use crate::journal::AddrFloor;

pub const ATTEMPTS: u32 = 20;
const PER_ADDR_ATTEMPTS: u32 = 5;

/// What the floor measurement found.
#[derive(Clone, Debug)]
pub struct Floor {
    pub host: String,
    pub port: u16,
    /// Median connect time as the client connects (resolution order, its fallbacks), over all
    /// attempts; a timed-out attempt counts as its limit, so a stall cannot hide.
    pub median_ms: Option<f64>,
    pub addrs: Vec<AddrFloor>,
    pub advice: Option<String>,
    /// https: the median TLS handshake after a connect.
    pub handshake_ms: Option<f64>,
    /// https: the handshake failed (a certificate witness does not trust, or no handshake at all).
    pub tls: Option<super::tls::TlsFailure>,
}

/// Per-connect limit: generous next to the floor allowed, but bounded so a stalled listener is
/// detected in seconds.
pub fn attempt_limit(max_floor: Duration) -> Duration {
    (max_floor * 5).clamp(Duration::from_millis(500), Duration::from_secs(2))
}

pub async fn measure(uri: &Uri, max_floor: Duration) -> Floor {
    let host = uri
        .host()
        .unwrap_or("")
        .trim_matches(['[', ']'])
        .to_string();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let limit = attempt_limit(max_floor);
    // As the client connects: the same connector, the same resolution and fallback.
    let mut conn = super::client::connector(limit);
    let origin: Uri = format!("http://{}:{port}/", uri.host().unwrap_or(""))
        .parse()
        .unwrap_or_else(|_| uri.clone());
    let first = super::client::first_address(uri.host().unwrap_or(""));
    let mut times = Vec::new();
    let mut shakes = Vec::new();
    let mut tls = None;
    let mut failed = 0u32;
    let mut closer = Closer::default();
    for _ in 0..ATTEMPTS {
        let t = Instant::now();
        let res = tokio::time::timeout(limit, conn.call(origin.clone())).await;
        // The kernel's handshake, as the load's connects are timed.
        let ms = match &res {
            Ok(Ok(io)) => super::client::kernel_connect(io.inner(), t.elapsed(), first),
            _ => t.elapsed(),
        }
        .as_secs_f64()
            * 1000.0;
        match res {
            Ok(Ok(io)) if https => {
                times.push(ms);
                let t = Instant::now();
                let shook = tokio::time::timeout(
                    limit,
                    super::tls::handshake(io.into_inner(), uri.host().unwrap_or(""), false),
                )
                .await;
                match shook {
                    Ok(Ok(s)) => {
                        shakes.push(t.elapsed().as_secs_f64() * 1000.0);
                        closer.close(s.into_inner().0).await;
                    }
                    Ok(Err(mut e)) => {
                        if e.plain_http {
                            // The URL to give instead, whole.
                            let plain = format!(
                                "http://{}{}",
                                super::tls::authority(&host, port),
                                uri.path_and_query().map_or("/", |p| p.as_str())
                            );
                            e.why = format!(
                                "no TLS at {}: it speaks plain HTTP: use {plain}",
                                super::tls::authority(&host, port)
                            );
                        }
                        tls = Some(e);
                        break;
                    }
                    Err(_) => {
                        tls = Some(super::tls::TlsFailure {
                            host: host.clone(),
                            why: format!(
                                "the TLS handshake with {} did not finish within {} ms",
                                super::tls::authority(&host, port),
                                limit.as_millis()
                            ),
                            certificate: false,
                            plain_http: false,
                        });
                        break;
                    }
                }
            }
            Ok(Ok(io)) => {
                times.push(ms);
                closer.close(io.into_inner()).await;
            }
            Ok(Err(_)) if ms < limit.as_secs_f64() * 1000.0 * 0.9 => {
                // Refused at once: measures nothing about the floor.
                failed += 1;
            }
            _ => {
                // Stalled: it cost at least its limit, and the median must show it.
                failed += 1;
                times.push(ms.max(limit.as_secs_f64() * 1000.0));
            }
        }
        // More than half failed: the median is already decided.
        if failed > ATTEMPTS / 2 {
            break;
        }
    }
    let median_ms = (!times.is_empty()).then(|| median(&mut times));
    let handshake_ms = (!shakes.is_empty()).then(|| median(&mut shakes));

    // The addresses resolved once for the run, in the resolver's order: no lookup here.
    let resolved: Vec<SocketAddr> = super::resolve::addrs(&host)
        .await
        .map(|a| a.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
        .unwrap_or_default();
    let mut addrs = Vec::new();
    for a in &resolved {
        addrs.push(time_addr(*a, limit, &mut closer).await);
    }
    let advice = advise(&host, port, &addrs, max_floor);
    Floor {
        host,
        port,
        median_ms,
        addrs,
        advice,
        handshake_ms,
        tls,
    }
}

async fn time_addr(addr: SocketAddr, limit: Duration, closer: &mut Closer) -> AddrFloor {
    let mut times = Vec::new();
    let mut failures = 0;
    let mut error = None;
    for _ in 0..PER_ADDR_ATTEMPTS {
        let t = Instant::now();
        match tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let took = super::client::kernel_connect(&s, t.elapsed(), Some(addr.ip()));
                times.push(took.as_secs_f64() * 1000.0);
                closer.close(s).await;
            }
            Ok(Err(e)) => {
                failures += 1;
                error = Some(match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
                    _ => e.to_string(),
                });
            }
            Err(_) => {
                failures += 1;
                error = Some(format!("no answer within {} ms", limit.as_millis()));
                break;
            }
        }
    }
    AddrFloor {
        addr: addr.to_string(),
        median_ms: (!times.is_empty()).then(|| median(&mut times)),
        attempts: times.len() as u32 + failures,
        failures,
        error,
    }
}

/// How long witness waits for the server to close a probe connection after witness closed its side.
const CLOSE_SEEN: Duration = Duration::from_millis(200);

/// Closes probe connections so the server sees them closed before the next probe: a server limited
/// to a few connections must not count witness's floor probes against its limit. Half-close, then
/// wait (bounded) for the server's own close; a server that keeps idle connections open after the
/// client's FIN is not waited for again.
#[derive(Default)]
struct Closer {
    gives_no_close: bool,
}

impl Closer {
    async fn close(&mut self, mut s: tokio::net::TcpStream) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        if s.shutdown().await.is_err() || self.gives_no_close {
            return;
        }
        let mut buf = [0u8; 512];
        let seen = tokio::time::timeout(CLOSE_SEEN, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        self.gives_no_close = seen.is_err();
    }
}

/// If the address the system tries first is slow or refused while another answers quickly, say so and
/// name the fix.
pub fn advise(host: &str, port: u16, addrs: &[AddrFloor], max_floor: Duration) -> Option<String> {
    let first = addrs.first()?;
    let limit_ms = max_floor.as_secs_f64() * 1000.0;
    let fast = addrs
        .iter()
        .skip(1)
        .find(|a| a.failures == 0 && a.median_ms.is_some_and(|m| m <= limit_ms))?;
    let first_bad = first.failures > 0 || first.median_ms.is_none_or(|m| m > limit_ms);
    if !first_bad {
        return None;
    }
    let what = match (&first.error, first.median_ms) {
        (Some(e), _) => e.clone(),
        (None, Some(m)) => format!("{m:.1} ms per connect"),
        (None, None) => "no answer".into(),
    };
    let ip = fast
        .addr
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&fast.addr);
    let first_ip = first
        .addr
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&first.addr);
    Some(format!(
        "{host} resolves to {first_ip} first ({what}) while {ip} answers in {:.1} ms; use http://{ip}:{port}",
        fast.median_ms.unwrap_or(0.0)
    ))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(a: &str, median: Option<f64>, failures: u32, error: Option<&str>) -> AddrFloor {
        AddrFloor {
            addr: a.into(),
            median_ms: median,
            attempts: 5,
            failures,
            error: error.map(Into::into),
        }
    }

    #[test]
    fn localhost_resolving_to_a_dead_ipv6_first_names_the_fix() {
        let a = [
            addr("[::1]:8000", None, 5, Some("no answer within 500 ms")),
            addr("127.0.0.1:8000", Some(0.1), 0, None),
        ];
        let advice = advise("localhost", 8000, &a, Duration::from_millis(100)).unwrap();
        assert!(
            advice.contains("localhost resolves to [::1] first"),
            "{advice}"
        );
        assert!(advice.contains("use http://127.0.0.1:8000"), "{advice}");
    }

    #[test]
    fn no_advice_when_the_first_address_is_fine() {
        let a = [
            addr("127.0.0.1:8000", Some(0.1), 0, None),
            addr("[::1]:8000", None, 5, Some("connection refused")),
        ];
        assert!(advise("localhost", 8000, &a, Duration::from_millis(100)).is_none());
    }

    #[test]
    fn the_median_is_the_middle() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
