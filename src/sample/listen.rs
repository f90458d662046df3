//! The kernel's listen queue, read before and after each level: the evidence beside a connect that
//! took a SYN retransmission (1 s, 3 s, 7 s). Two readings:
//!
//! - `/proc/net/netstat`'s TcpExt `ListenOverflows` and `ListenDrops`: how many SYNs (or handshakes'
//!   last ACKs) the kernel dropped because a listener's accept queue was full. System-wide: every
//!   listener on this host (in this network namespace) counts, not only the server's.
//! - The target port's listening socket: its maximum accept queue (the backlog it was given, as
//!   `listen()` capped it) and how many connections wait in it now. The sock_diag netlink dump (what
//!   `ss -lnt` shows as Send-Q and Recv-Q) has both; `/proc/net/tcp{,6}` only the current queue (its
//!   `rx_queue` for a listener; its `tx_queue` is always 0 there), read when netlink is refused.
//!
//! The parsers are pure and tested on real-format text; the reader returns `None` for whatever it
//! cannot read (another network namespace, a container's port, a kernel without the file).

use crate::journal::{Event, Journal};

/// One reading of the listen queue's counters and the port's listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    pub overflows: Option<u64>,
    pub drops: Option<u64>,
    pub backlog: Option<u64>,
    pub queued: Option<u64>,
    /// TcpExt's `TCPSynRetrans`: SYNs (and SYN-ACKs) sent again, system-wide.
    pub syn_retrans: Option<u64>,
}

/// TcpExt's `ListenOverflows` and `ListenDrops` from the text of /proc/net/netstat (a header line of
/// names, then a line of values, per protocol).
pub fn parse_netstat(text: &str) -> (Option<u64>, Option<u64>) {
    (
        netstat_counter(text, "ListenOverflows"),
        netstat_counter(text, "ListenDrops"),
    )
}

/// One TcpExt counter by name from the text of /proc/net/netstat.
pub fn netstat_counter(text: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines();
    while let Some(names) = lines.next() {
        let Some(names) = names.strip_prefix("TcpExt:") else {
            continue;
        };
        let values = lines.next().and_then(|v| v.strip_prefix("TcpExt:"))?;
        return names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse().ok());
    }
    None
}

/// How many connections wait in the accept queue of `port`'s listening sockets, from the text of
/// /proc/net/tcp or /proc/net/tcp6 (state 0A is LISTEN; for a listener `rx_queue` is the accept
/// queue). Several listeners on the port (SO_REUSEPORT workers) add up; None when none listens.
pub fn parse_proc_tcp(text: &str, port: u16) -> Option<u64> {
    let want = format!("{port:04X}");
    let mut found = None;
    for line in text.lines().skip(1) {
        let mut f = line.split_whitespace();
        let (Some(_sl), Some(local), Some(_remote), Some(state), Some(queues)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((_, p)) = local.rsplit_once(':') else {
            continue;
        };
        if state != "0A" || !p.eq_ignore_ascii_case(&want) {
            continue;
        }
        let Some(rx) = queues
            .split_once(':')
            .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
        else {
            continue;
        };
        found = Some(found.unwrap_or(0) + rx);
    }
    found
}

/// sock_diag's answer types and the layout of `struct inet_diag_msg` (linux/inet_diag.h).
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_HDRLEN: usize = 16;
/// family, state, timer, retrans (4), the socket id (48), expires, rqueue, wqueue, uid, inode (20).
const INET_DIAG_MSG_LEN: usize = 72;
const TCP_LISTEN: u8 = 10;

/// What a sock_diag dump of listeners said about `port`, folded buffer by buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Diag {
    /// (current accept queue, its maximum), added over the port's listeners.
    pub port: Option<(u64, u64)>,
    /// The dump's end (or an error) was read: no more buffers to ask for.
    pub done: bool,
}

/// Folds one buffer of a sock_diag dump (netlink messages, each 4-byte aligned) into `acc`. For a
/// listener the kernel puts the accept queue in `idiag_rqueue` and the backlog in `idiag_wqueue`.
pub fn parse_diag(buf: &[u8], port: u16, acc: &mut Diag) {
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut at = 0usize;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32_at(buf, at) as usize;
        let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            acc.done = true;
            return;
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR => {
                acc.done = true;
                return;
            }
            SOCK_DIAG_BY_FAMILY if len >= NLMSG_HDRLEN + INET_DIAG_MSG_LEN => {
                let m = &buf[at + NLMSG_HDRLEN..at + len];
                let sport = u16::from_be_bytes([m[4], m[5]]);
                if m[1] == TCP_LISTEN && sport == port {
                    let (q, b) = acc.port.unwrap_or((0, 0));
                    acc.port = Some((q + u32_at(m, 56) as u64, b + u32_at(m, 60) as u64));
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
}

/// Asks the kernel (sock_diag over netlink) for the TCP listeners of one address family and folds
/// what it says about `port`. None when netlink is refused or answers nothing readable. Bounded: a
/// receive timeout and a cap on the buffers read.
fn diag(family: u8, port: u16) -> Option<Diag> {
    // SAFETY: plain syscalls on a socket this function owns and closes; buffers outlive the calls.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        );
        if fd < 0 {
            return None;
        }
        let close = |r| {
            libc::close(fd);
            r
        };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        // nlmsghdr, then inet_diag_req_v2: family, protocol, ext, pad, states, a zeroed socket id.
        let mut req = [0u8; NLMSG_HDRLEN + 56];
        req[0..4].copy_from_slice(&((NLMSG_HDRLEN + 56) as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        req[6..8].copy_from_slice(&flags.to_ne_bytes());
        req[8..12].copy_from_slice(&1u32.to_ne_bytes());
        req[16] = family;
        req[17] = libc::IPPROTO_TCP as u8;
        req[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
        let mut to: libc::sockaddr_nl = std::mem::zeroed();
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sent = libc::sendto(
            fd,
            req.as_ptr() as *const libc::c_void,
            req.len(),
            0,
            &to as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        );
        if sent < 0 {
            return close(None);
        }
        let mut acc = Diag::default();
        let mut buf = vec![0u8; 32 * 1024];
        for _ in 0..256 {
            let n = libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0);
            if n <= 0 {
                return close(None);
            }
            parse_diag(&buf[..n as usize], port, &mut acc);
            if acc.done {
                return close(Some(acc));
            }
        }
        close(None)
    }
}

/// The port's listener: (backlog, queued), each None when it cannot be read.
fn listener(port: u16) -> (Option<u64>, Option<u64>) {
    let mut seen = None;
    let mut all = true;
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        match diag(family, port) {
            Some(d) => {
                if let Some((q, b)) = d.port {
                    let (sq, sb) = seen.unwrap_or((0, 0));
                    seen = Some((sq + q, sb + b));
                }
            }
            None => all = false,
        }
    }
    if let Some((q, b)) = seen.filter(|_| all) {
        return (Some(b), Some(q));
    }
    // No netlink: the current queue from /proc, the backlog unknown.
    let queued = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| parse_proc_tcp(&t, port))
        .reduce(|a, b| a + b);
    (None, queued)
}

/// Reads the counters and the port's listener now.
pub fn read(port: u16) -> Reading {
    let netstat = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let (overflows, drops) = parse_netstat(&netstat);
    let (backlog, queued) = listener(port);
    Reading {
        overflows,
        drops,
        backlog,
        queued,
        syn_retrans: netstat_counter(&netstat, "TCPSynRetrans"),
    }
}

/// Journals one reading for a level (`when`: "before" or "after") when the target is a TCP host and
/// port (HTTP, or MCP over streamable HTTP); nothing for MCP over stdio.
pub fn journal_listen(journal: &Journal, level: u32, when: &str, target: Option<&hyper::Uri>) {
    let Some(uri) = target else { return };
    let Some(port) = uri.port_u16().or_else(|| match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    }) else {
        return;
    };
    let r = read(port);
    journal.emit(Event::Listen {
        level,
        when: when.into(),
        port,
        overflows: r.overflows,
        drops: r.drops,
        backlog: r.backlog,
        queued: r.queued,
        syn_retrans: r.syn_retrans,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first lines of a real /proc/net/netstat (kernel 6.x), values cut short.
    const NETSTAT: &str = "TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed EmbryonicRsts PruneCalled RcvPruned OfoPruned OutOfWindowIcmps LockDroppedIcmps ArpFilter TW TWRecycled TWKilled PAWSActive PAWSEstab BeyondWindow TSEcrRejected PAWSOldAck PAWSTimewait DelayedACKs DelayedACKLocked DelayedACKLost ListenOverflows ListenDrops TCPHPHits
TcpExt: 0 0 0 0 0 0 0 0 0 0 12 0 0 0 0 0 0 0 0 0 0 5 14 17 57
IpExt: InNoRoutes InTruncatedPkts InMcastPkts
IpExt: 0 0 0
";

    #[test]
    fn netstat_s_listen_counters_are_read_by_name() {
        assert_eq!(parse_netstat(NETSTAT), (Some(14), Some(17)));
        assert_eq!(parse_netstat("IpExt: A\nIpExt: 1\n"), (None, None));
        assert_eq!(parse_netstat("TcpExt: ListenOverflows\n"), (None, None));
        assert_eq!(parse_netstat(""), (None, None));
    }

    /// A real /proc/net/tcp: a listener on 127.0.0.1:33081 (0x8139) with 3 connections waiting,
    /// one of those connections, and another listener on port 2024.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1061 1 00000000da9818b4 100 0 0 10 0
   1: 0100007F:8139 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 18405 4 000000005a29c550 100 0 0 10 0
   2: 0100007F:8139 0100007F:846E 01 00000000:00000000 00:00000000 00000000     0        0 0 1 000000004be6d4af 20 0 0 10 -1
";

    #[test]
    fn a_listener_s_accept_queue_is_its_rx_queue_and_connections_on_the_port_do_not_count() {
        assert_eq!(parse_proc_tcp(TCP, 33081), Some(3));
        assert_eq!(parse_proc_tcp(TCP, 2024), Some(0));
        assert_eq!(parse_proc_tcp(TCP, 80), None);
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000002 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(parse_proc_tcp(tcp6, 8080), Some(2));
    }

    fn diag_msg(state: u8, sport: u16, rq: u32, wq: u32) -> Vec<u8> {
        let len = NLMSG_HDRLEN + INET_DIAG_MSG_LEN;
        let mut m = vec![0u8; len];
        m[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let d = NLMSG_HDRLEN;
        m[d] = libc::AF_INET as u8;
        m[d + 1] = state;
        m[d + 4..d + 6].copy_from_slice(&sport.to_be_bytes());
        m[d + 56..d + 60].copy_from_slice(&rq.to_ne_bytes());
        m[d + 60..d + 64].copy_from_slice(&wq.to_ne_bytes());
        m
    }

    #[test]
    fn a_diag_dump_gives_the_port_s_backlog_and_queue_across_buffers() {
        let mut acc = Diag::default();
        let mut buf = diag_msg(TCP_LISTEN, 8080, 2, 128);
        buf.extend(diag_msg(TCP_LISTEN, 9090, 5, 5));
        parse_diag(&buf, 8080, &mut acc);
        assert_eq!(
            acc,
            Diag {
                port: Some((2, 128)),
                done: false
            }
        );
        // A second listener on the port (SO_REUSEPORT) adds up; then the dump ends.
        let mut buf = diag_msg(TCP_LISTEN, 8080, 1, 128);
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        buf.extend(done);
        parse_diag(&buf, 8080, &mut acc);
        assert_eq!(
            acc,
            Diag {
                port: Some((3, 256)),
                done: true
            }
        );
        // A cut message ends the fold rather than read past the buffer.
        let mut acc = Diag::default();
        parse_diag(&diag_msg(TCP_LISTEN, 8080, 1, 1)[..40], 8080, &mut acc);
        assert_eq!(
            acc,
            Diag {
                port: None,
                done: true
            }
        );
    }

    #[test]
    fn a_real_listener_s_backlog_and_queue_are_read_from_the_kernel() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: listen() again on a listening socket only changes its backlog.
        unsafe { libc::listen(l.as_raw_fd(), 7) };
        let port = l.local_addr().unwrap().port();
        let _c: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let r = read(port);
        assert_eq!(r.queued, Some(3), "{r:?}");
        // Where netlink is refused (a sandbox) the backlog is unknown, never a made-up figure.
        assert!(r.backlog.is_none_or(|b| b == 7), "{r:?}");
        assert!(r.overflows.is_some() && r.drops.is_some(), "{r:?}");
    }
}
