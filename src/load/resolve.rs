//! Name resolution as its own phase. witness resolves each host name it is given once, before the
//! first probe, times the lookup, journals it ([`Event::Resolved`]) and pins the addresses: every
//! connection after (the connect floor, health probes, every request over HTTP/1.1 or HTTP/2, MCP
//! over HTTP, the soak's drivers and gauges) goes to a pinned address through [`Pinned`], while the
//! Host header and TLS (SNI, the certificate's name) keep the name. So no latency, no floor and no
//! health timeout holds a lookup: a first nameserver that never answers costs glibc's 5 s per lookup,
//! which used to be charged to every connect.
//!
//! Again only when it must: once a connect found that every pinned address stopped answering, in
//! the background (no request waits on it), at most every [`AGAIN_AFTER`]; journalled when it
//! changed something (other addresses, a failure) or was slow.
//!
//! The order of the addresses is the system's (getaddrinfo's, as before): `localhost` with `::1`
//! first stays so, and the connect floor's advice about a slow first address still applies.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin as Boxed;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::client::legacy::connect::dns::Name;

use crate::journal::{Event, Journal, ResolverConf};

/// A lookup that has not finished by then gives up: glibc's worst case (3 nameservers, `timeout:30`,
/// `attempts:5`) is minutes, and nothing can be measured without an address.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The soonest a name is resolved again after its last lookup.
pub const AGAIN_AFTER: Duration = Duration::from_secs(10);

/// Why a name is resolved again.
pub const AGAIN_WHY: &str = "every address stopped answering";

/// One lookup, timed.
#[derive(Clone, Debug)]
pub struct Resolution {
    pub host: String,
    pub addrs: Vec<IpAddr>,
    pub took: Duration,
    /// No address: the resolver's words.
    pub error: Option<String>,
    /// The resolver gave up without an answer (a nameserver that did not answer, or [`LIMIT`]):
    /// not a name that does not exist.
    pub unanswered: bool,
    pub resolver: ResolverConf,
}

impl Resolution {
    /// As the journal keeps it.
    pub fn event(&self, again: Option<&str>) -> Event {
        Event::Resolved {
            host: self.host.clone(),
            addrs: self.addrs.iter().map(IpAddr::to_string).collect(),
            took_s: self.took.as_secs_f64(),
            again: again.map(str::to_string),
            error: self.error.clone(),
            resolver: self.resolver.clone(),
        }
    }
}

/// Asks the system's resolver (getaddrinfo, as the connector did: /etc/hosts, DNS, whatever
/// nsswitch.conf says), timed, bounded by [`LIMIT`].
pub async fn lookup(host: &str) -> Resolution {
    let resolver = system_conf(host);
    let start = Instant::now();
    let asked = tokio::time::timeout(LIMIT, tokio::net::lookup_host((host, 0))).await;
    let took = start.elapsed();
    let (addrs, error, unanswered) = match asked {
        Ok(Ok(a)) => {
            let mut addrs: Vec<IpAddr> = Vec::new();
            for s in a {
                if !addrs.contains(&s.ip()) {
                    addrs.push(s.ip());
                }
            }
            let error = addrs.is_empty().then(|| "no address".to_string());
            (addrs, error, false)
        }
        Ok(Err(e)) => {
            let words = e.to_string();
            let words = words
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&words)
                .to_string();
            // EAI_AGAIN: no nameserver gave an answer (std says it in gai_strerror's words).
            let unanswered = words.contains("Temporary failure");
            (Vec::new(), Some(words), unanswered)
        }
        Err(_) => (
            Vec::new(),
            Some(format!("no answer within {} s", LIMIT.as_secs())),
            true,
        ),
    };
    Resolution {
        host: host.to_string(),
        addrs,
        took,
        error,
        unanswered,
        resolver,
    }
}

/// /etc/resolv.conf and /etc/hosts as they are now, for `host`.
fn system_conf(host: &str) -> ResolverConf {
    let mut c = std::fs::read_to_string("/etc/resolv.conf")
        .map(|s| parse_resolv_conf(&s))
        .unwrap_or_default();
    c.in_hosts = std::fs::read_to_string("/etc/hosts").is_ok_and(|s| hosts_names(&s, host));
    c
}

/// The nameservers and the `options timeout:N attempts:N` of a resolv.conf (the last of each wins,
/// as in glibc; `RES_OPTIONS` is not read).
pub fn parse_resolv_conf(text: &str) -> ResolverConf {
    let mut c = ResolverConf::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                if let Some(ns) = words.next() {
                    c.nameservers.push(ns.to_string());
                }
            }
            Some("options") => {
                for w in words {
                    if let Some(t) = w
                        .strip_prefix("timeout:")
                        .and_then(|t| t.parse::<f64>().ok())
                    {
                        c.timeout_s = Some(t);
                    }
                    if let Some(a) = w.strip_prefix("attempts:").and_then(|a| a.parse().ok()) {
                        c.attempts = Some(a);
                    }
                }
            }
            _ => {}
        }
    }
    c
}

/// Whether a hosts file names `host` (an address, then names and aliases).
pub fn hosts_names(text: &str, host: &str) -> bool {
    text.lines().any(|line| {
        let line = line.split('#').next().unwrap_or("");
        line.split_whitespace()
            .skip(1)
            .any(|n| n.eq_ignore_ascii_case(host))
    })
}

/// A name's pinned addresses and the state of looking it up again.
struct Pin {
    addrs: Vec<IpAddr>,
    at: Instant,
    again: bool,
    /// The last lookup is not in the journal yet (no journal was open).
    unjournalled: Option<Resolution>,
}

static PINS: Mutex<BTreeMap<String, Pin>> = Mutex::new(BTreeMap::new());
static SINK: Mutex<Option<Journal>> = Mutex::new(None);

fn pins() -> std::sync::MutexGuard<'static, BTreeMap<String, Pin>> {
    PINS.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// A host as a URL writes it is a name (not an address literal).
pub fn is_name(host: &str) -> bool {
    !host.is_empty() && host.trim_matches(['[', ']']).parse::<IpAddr>().is_err()
}

/// The pinned addresses of `host`, if it was resolved.
pub fn pinned(host: &str) -> Option<Vec<IpAddr>> {
    pins().get(&key(host)).map(|p| p.addrs.clone())
}

/// Pins what a lookup found (a failed lookup pins nothing); journalled now when a journal is open,
/// else by [`journal_to`].
pub fn pin(r: &Resolution) {
    if r.addrs.is_empty() {
        return;
    }
    let sink = SINK.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(j) = &sink {
        j.emit(r.event(None));
    }
    pins().insert(
        key(&r.host),
        Pin {
            addrs: r.addrs.clone(),
            at: Instant::now(),
            again: false,
            unjournalled: sink.is_none().then(|| r.clone()),
        },
    );
}

/// From now on lookups are journalled in `journal`; the ones made before it opened are journalled
/// now and returned, for the command to say.
pub fn journal_to(journal: &Journal) -> Vec<Resolution> {
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal.clone());
    let done: Vec<Resolution> = pins()
        .values_mut()
        .filter_map(|p| p.unjournalled.take())
        .collect();
    for r in &done {
        journal.emit(r.event(None));
    }
    done
}

/// The addresses to connect to for `host`: an address literal as it is, a pinned name's pins, and
/// a name never resolved is resolved now (once) and pinned.
pub async fn addrs(host: &str) -> Result<Vec<IpAddr>, String> {
    let bare = host.trim_matches(['[', ']']);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    if let Some(a) = pinned(bare) {
        return Ok(a);
    }
    // One lookup per name even when many connections ask at once.
    static LATE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = LATE.lock().await;
    if let Some(a) = pinned(bare) {
        return Ok(a);
    }
    let r = lookup(bare).await;
    pin(&r);
    match r.error {
        Some(e) => Err(format!("could not resolve {bare}: {e}")),
        None => Ok(r.addrs),
    }
}

/// A connect to `host` failed on every pinned address: look it up again, in the background, when
/// the last lookup is at least [`AGAIN_AFTER`] old and none is under way.
pub fn unanswered(host: &str) {
    let k = key(host);
    {
        let mut pins = pins();
        let Some(p) = pins.get_mut(&k) else { return };
        if p.again || p.at.elapsed() < AGAIN_AFTER {
            return;
        }
        p.again = true;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        if let Some(p) = pins().get_mut(&k) {
            p.again = false;
        }
        return;
    };
    rt.spawn(async move {
        let r = lookup(&k).await;
        let before = pinned(&k).unwrap_or_default();
        let changed = r.error.is_some() || r.addrs != before;
        if let Some(p) = pins().get_mut(&k) {
            p.again = false;
            p.at = Instant::now();
            if !r.addrs.is_empty() {
                p.addrs = r.addrs.clone();
            }
        }
        // A quick lookup that gave the same addresses changes nothing and is not journalled.
        if changed || r.took.as_secs_f64() >= crate::analyze::resolution::SLOW_S {
            let sink = SINK.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(j) = sink {
                j.emit(r.event(Some(AGAIN_WHY)));
            }
        }
    });
}

/// The resolver the load client's connector uses: a pinned name's addresses at once, with no
/// lookup; a name never resolved is resolved once ([`addrs`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pinned;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Name> for Pinned {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Boxed<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let ips = addrs(&host).await?;
            // The connector sets the port.
            Ok(ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, 0))
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_gives_its_nameservers_and_options() {
        let c = parse_resolv_conf(
            "# generated\nnameserver 10.0.0.9\nnameserver 127.0.0.1 # local\nsearch example.com\noptions ndots:1 timeout:2 attempts:1\n",
        );
        assert_eq!(c.nameservers, vec!["10.0.0.9", "127.0.0.1"]);
        assert_eq!(c.timeout_s, Some(2.0));
        assert_eq!(c.attempts, Some(1));
        let bare = parse_resolv_conf("nameserver 10.0.0.9\n");
        assert_eq!(bare.timeout_s, None, "glibc's default is not written in");
    }

    #[test]
    fn a_hosts_file_names_a_host_by_name_or_alias_not_by_address() {
        let h = "127.0.0.1 localhost\n::1 localhost ip6-localhost # v6\n# 127.0.0.2 app.test\n";
        assert!(hosts_names(h, "localhost"));
        assert!(hosts_names(h, "IP6-LOCALHOST"));
        assert!(!hosts_names(h, "app.test"), "a comment names nothing");
        assert!(!hosts_names(h, "127.0.0.1"));
    }

    #[tokio::test]
    async fn a_name_whose_addresses_stopped_answering_is_looked_up_again_apart_and_not_too_soon() {
        // localhost resolves anywhere; pinned to a documentation address, as if it had moved.
        let moved: IpAddr = "192.0.2.1".parse().unwrap();
        let old = Instant::now()
            .checked_sub(AGAIN_AFTER + Duration::from_secs(1))
            .unwrap();
        pins().insert(
            "localhost".into(),
            Pin {
                addrs: vec![moved],
                at: Instant::now(),
                again: false,
                unjournalled: None,
            },
        );
        unanswered("localhost");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            pinned("localhost").unwrap(),
            vec![moved],
            "a lookup younger than AGAIN_AFTER is not made again"
        );
        if let Some(p) = pins().get_mut("localhost") {
            p.at = old;
        }
        unanswered("localhost");
        let deadline = Instant::now() + Duration::from_secs(10);
        while pinned("localhost").unwrap() == vec![moved] && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let now = pinned("localhost").unwrap();
        assert!(now.iter().all(IpAddr::is_loopback), "{now:?}");
        pins().remove("localhost");
    }

    #[tokio::test]
    async fn an_address_is_taken_as_it_is_and_a_pinned_name_is_not_looked_up() {
        assert_eq!(
            addrs("[::1]").await.unwrap(),
            vec!["::1".parse::<IpAddr>().unwrap()]
        );
        assert!(!is_name("127.0.0.1") && !is_name("[::1]") && is_name("app.test"));
        // A name that cannot resolve (.invalid, RFC 2606) is answered from its pin.
        let r = Resolution {
            host: "pinned.invalid".into(),
            addrs: vec!["127.0.0.9".parse().unwrap()],
            took: Duration::from_secs(5),
            error: None,
            unanswered: false,
            resolver: ResolverConf::default(),
        };
        pin(&r);
        let start = Instant::now();
        assert_eq!(
            addrs("PINNED.invalid").await.unwrap(),
            vec!["127.0.0.9".parse::<IpAddr>().unwrap()]
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
