//! The server under test, however it runs. The process server supervises a child; the container
//! server runs or attaches to a Docker container; the attach server watches whatever listens on a
//! port. All give the load driver and samplers the same things: an identity (pid + start time, or
//! container id + `StartedAt`), a lifecycle in the journal, and a way to stop.

pub mod attach;
pub mod cgroup;
pub mod container;
pub mod exit;
pub mod fds;
pub mod guard;
pub mod logs;
pub mod process;
pub mod reaper;
pub mod spawn;
pub mod tree;
pub mod watchdog;

use crate::journal::Identity;
use crate::sample::PidSource;

/// The server under test, however it runs. The load driver and samplers see only this.
pub enum Target {
    /// witness's own child, supervised.
    Process(process::Supervisor),
    /// Someone else's process, found by the port it listens on.
    Attach(attach::Attach),
    /// A Docker container: one witness started (owned), or one it attached to (observed only).
    Container(container::Container),
}

impl Target {
    /// Who the server is right now.
    pub fn identity(&self) -> Option<Identity> {
        match self {
            Target::Process(s) => s.identity(),
            Target::Attach(a) => a.identity(),
            Target::Container(c) => c.identity(),
        }
    }

    /// For samplers: the pid to read, looked up at each reading.
    pub fn pid_source(&self) -> PidSource {
        match self {
            Target::Process(s) => {
                let st = s.state();
                Box::new(move || match &*st.borrow() {
                    process::State::Running(id) => Some(id.pid),
                    _ => None,
                })
            }
            Target::Attach(a) => {
                let port = a.port;
                // A socket-only identity (pid unreadable) has no process to sample.
                Box::new(move || listener_of(port).map(|i| i.pid).filter(|p| *p != 0))
            }
            // The container's main process as the host sees it (inspect's `State.Pid`).
            Target::Container(c) => {
                let st = c.state();
                Box::new(move || match &*st.borrow() {
                    process::State::Running(id) => Some(id.pid),
                    _ => None,
                })
            }
        }
    }

    /// The samplers that fit this target: the process tree from /proc, or the engine's container
    /// stats.
    pub fn samplers(&self) -> Vec<Box<dyn crate::sample::Sampler>> {
        use crate::sample::{container::ContainerSampler, proc::ProcSampler};
        match self {
            Target::Container(c) => vec![Box::new(ContainerSampler::new(
                c.docker().clone(),
                c.id.clone(),
            ))],
            _ => vec![Box::new(ProcSampler::new(self.pid_source()))],
        }
    }

    /// Whether witness owns the server (and may stop it or inject faults).
    pub fn owned(&self) -> bool {
        match self {
            Target::Process(_) => true,
            Target::Attach(_) => false,
            Target::Container(c) => c.owned(),
        }
    }

    /// The lifecycle state of a server witness watches by its engine or as its parent.
    pub fn state(&self) -> Option<tokio::sync::watch::Receiver<process::State>> {
        match self {
            Target::Process(s) => Some(s.state()),
            Target::Container(c) => Some(c.state()),
            Target::Attach(_) => None,
        }
    }

    /// Where to send control messages (stop, forward a signal, inject a fault), for targets that
    /// take them.
    pub fn control(&self) -> Option<tokio::sync::mpsc::UnboundedSender<process::Control>> {
        match self {
            Target::Process(s) => Some(s.control()),
            Target::Container(c) => Some(c.control()),
            Target::Attach(_) => None,
        }
    }

    /// Waits until the server is gone for good; returns its last status. An attached process has no
    /// end witness can see, so waiting on one ends only when the task is stopped.
    pub async fn wait(self) -> anyhow::Result<i32> {
        match self {
            Target::Process(s) => s.wait().await,
            Target::Container(c) => c.wait().await,
            Target::Attach(_) => std::future::pending().await,
        }
    }

    /// Stops an owned server (TERM, grace, KILL) or lets go of an attached one.
    pub async fn stop(self, reason: &str) -> anyhow::Result<Option<i32>> {
        match self {
            Target::Process(s) => s.stop(reason).await.map(Some),
            Target::Attach(a) => {
                a.stop();
                Ok(None)
            }
            Target::Container(c) if c.owned() => c.stop(reason).await.map(Some),
            Target::Container(c) => c.stop(reason).await.map(|_| None),
        }
    }
}

/// pid + start time (clock ticks since boot, from /proc/PID/stat), or None if the process is gone.
pub fn identity_of(pid: u32) -> Option<Identity> {
    let stat = procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()?;
    Some(Identity {
        pid,
        start_time: stat.starttime,
        container_id: None,
        container_started_at: None,
        socket_inode: None,
    })
}

/// What a look for the listener on a port found.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// The process holding the listening socket (the oldest holder: a pre-fork server shares the
    /// socket with its workers).
    Listener(Identity),
    /// A listening socket exists, but no process holding it could be read (witness may not read
    /// other users' /proc/PID/fd): its identity falls back to the socket's inode; `why` says so.
    SocketOnly { identity: Identity, why: String },
    /// Nothing listens on the port.
    Nobody,
    /// /proc could not be read at all (out of file descriptors, no /proc): not "not listening".
    Unseen(String),
}

impl Seen {
    /// The identity found, if any.
    pub fn identity(&self) -> Option<Identity> {
        match self {
            Seen::Listener(i) | Seen::SocketOnly { identity: i, .. } => Some(i.clone()),
            _ => None,
        }
    }
}

/// Looks for the process listening on a TCP port (IPv4 or IPv6) through /proc: the socket's inode
/// in /proc/net/tcp{,6}, then the process holding that inode among its fds. No lsof needed.
pub fn look(port: u16) -> Seen {
    let inodes: Vec<u64> = match listening() {
        Ok(l) => l
            .into_iter()
            .filter(|(_, a)| a.port() == port)
            .map(|(inode, _)| inode)
            .collect(),
        Err(e) => return Seen::Unseen(e),
    };
    if inodes.is_empty() {
        return Seen::Nobody;
    }
    let all = match procfs::process::all_processes() {
        Ok(a) => a,
        Err(e) => return Seen::Unseen(format!("could not list /proc: {e}")),
    };
    let mut found: Vec<u32> = Vec::new();
    let mut unreadable = 0u32;
    let mut unreadable_why = String::new();
    for p in all.flatten() {
        let fds = match p.fd() {
            Ok(f) => f,
            Err(procfs::ProcError::PermissionDenied(_)) => {
                unreadable += 1;
                continue;
            }
            Err(procfs::ProcError::NotFound(_)) => continue,
            Err(e) => {
                if unreadable_why.is_empty() {
                    unreadable_why = e.to_string();
                }
                unreadable += 1;
                continue;
            }
        };
        for fd in fds.flatten() {
            if let procfs::process::FDTarget::Socket(inode) = fd.target {
                if inodes.contains(&inode) {
                    found.push(p.pid as u32);
                    break;
                }
            }
        }
    }
    if let Some(id) = found
        .into_iter()
        .filter_map(identity_of)
        .min_by_key(|id| (id.start_time, id.pid))
    {
        return Seen::Listener(id);
    }
    if unreadable == 0 {
        // The socket's holder went away between the two reads.
        return Seen::Nobody;
    }
    let inode = inodes.iter().copied().min().unwrap_or(0);
    let why = if unreadable_why.is_empty() {
        format!("permission denied reading /proc/PID/fd of {unreadable} process(es) not witness's own (uid {})", unsafe { libc::getuid() })
    } else {
        format!("{unreadable} process(es) could not be read: {unreadable_why}")
    };
    Seen::SocketOnly {
        identity: Identity {
            pid: 0,
            start_time: 0,
            container_id: None,
            container_started_at: None,
            socket_inode: Some(inode),
        },
        why: format!(
            "the process listening on port {port} could not be identified ({why}); its identity falls back to the listening socket's inode {inode} from /proc/net/tcp, which a restarted server replaces"
        ),
    }
}

/// The TCP addresses witness's own descendants (the server it started, its workers, the daemons
/// it adopted as their subreaper) listen on, in port order: read from /proc/net/tcp{,6} and each
/// descendant's fds. Empty when nothing of witness's listens (or /proc cannot be read).
pub fn our_listeners() -> Vec<std::net::SocketAddr> {
    let by_inode = listening().unwrap_or_default();
    if by_inode.is_empty() {
        return Vec::new();
    }
    let mut found: Vec<std::net::SocketAddr> = Vec::new();
    for pid in crate::sample::kin::below(&[std::process::id()]) {
        let Ok(fds) = procfs::process::Process::new(pid as i32).and_then(|p| p.fd()) else {
            continue;
        };
        for fd in fds.flatten() {
            if let procfs::process::FDTarget::Socket(inode) = fd.target {
                if let Some(a) = by_inode.get(&inode) {
                    if !found.contains(a) {
                        found.push(*a);
                    }
                }
            }
        }
    }
    found.sort_by_key(|a| (a.port(), a.is_ipv6()));
    found
}

/// The process of witness's own tree (the server it started, its descendants, the daemons it
/// adopted) holding the listening socket on `port`: the oldest holder, as a pre-fork server's workers
/// share their parent's socket. Only witness's descendants' descriptors are read, so a look costs
/// the size of the server's tree, not of the machine's.
pub fn our_listener(port: u16) -> Option<Identity> {
    let inodes: Vec<u64> = listening()
        .ok()?
        .into_iter()
        .filter(|(_, a)| a.port() == port)
        .map(|(inode, _)| inode)
        .collect();
    if inodes.is_empty() {
        return None;
    }
    crate::sample::kin::below(&[std::process::id()])
        .into_iter()
        .filter(|pid| {
            procfs::process::Process::new(*pid as i32)
                .and_then(|p| p.fd())
                .is_ok_and(|fds| {
                    fds.flatten().any(|fd| {
                        matches!(fd.target, procfs::process::FDTarget::Socket(i) if inodes.contains(&i))
                    })
                })
        })
        .filter_map(identity_of)
        .min_by_key(|id| (id.start_time, id.pid))
}

/// Every listening TCP socket (IPv4 and IPv6) by its inode: asked of the kernel by its state
/// (sock_diag), else read from /proc/net/tcp{,6}; an error only when neither table could be read
/// (not "nothing listens").
fn listening() -> Result<std::collections::BTreeMap<u64, std::net::SocketAddr>, String> {
    match diag::listening() {
        Ok(l) => Ok(l),
        Err(_) => listening_from_proc(),
    }
}

/// The tables in /proc list every socket: under load, tens of thousands in TIME_WAIT, and a read
/// of them took 30–50 ms, once a second while a level ran (a tenth of the client's CPU per
/// request at 80 k/s). sock_diag returns the listening ones alone.
fn listening_from_proc() -> Result<std::collections::BTreeMap<u64, std::net::SocketAddr>, String> {
    use procfs::net::TcpState;
    let mut by_inode = std::collections::BTreeMap::new();
    let mut errors = Vec::new();
    for table in [procfs::net::tcp(), procfs::net::tcp6()] {
        match table {
            Ok(t) => by_inode.extend(
                t.into_iter()
                    .filter(|e| e.state == TcpState::Listen)
                    .map(|e| (e.inode, e.local_address)),
            ),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.len() == 2 {
        return Err(format!("could not read /proc/net/tcp: {}", errors[0]));
    }
    Ok(by_inode)
}

/// Whether `pid` is witness's own descendant: the server it started, its workers, and the daemons
/// that left the server's tree but came to witness as their subreaper.
pub fn is_ours(pid: u32) -> bool {
    let me = std::process::id();
    let mut cur = pid;
    for _ in 0..64 {
        if cur == me {
            return true;
        }
        if cur <= 1 {
            return false;
        }
        match procfs::process::Process::new(cur as i32).and_then(|p| p.stat()) {
            Ok(st) => cur = st.ppid as u32,
            Err(_) => return false,
        }
    }
    false
}

/// "pid 1234 (toy_server --port 8080)": who a process is, for a person.
pub fn describe_pid(pid: u32) -> String {
    let cmd = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.cmdline())
        .unwrap_or_default()
        .join(" ");
    if cmd.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} ({cmd})")
    }
}

/// The process listening on a TCP port, or the socket-only identity when its pid cannot be read.
pub fn listener_of(port: u16) -> Option<Identity> {
    look(port).identity()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_identity_is_readable_and_stable() {
        let me = std::process::id();
        let a = identity_of(me).unwrap();
        assert_eq!(a, identity_of(me).unwrap());
        assert!(a.start_time > 0);
    }

    #[test]
    fn the_listener_on_a_port_is_found_through_proc() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let id = listener_of(port).expect("our own listener");
        assert_eq!(id.pid, std::process::id());
        drop(l);
        assert!(listener_of(port).is_none());
    }
}

/// A netlink datagram socket of `protocol` (sock_diag here, the process-event connector in the
/// tree watcher), closed when dropped.
fn netlink_socket(protocol: libc::c_int) -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: socket takes plain integers; a descriptor it returns is owned by the OwnedFd alone.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            protocol,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(<std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd))
    }
}

/// The kernel's socket table asked over netlink (NETLINK_SOCK_DIAG, as `ss -lt` does) for TCP
/// sockets in LISTEN alone.
mod diag {
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const TCP_LISTEN: u32 = 10;
    /// `struct nlmsghdr`, then `struct inet_diag_req_v2` (family, protocol, ext, pad, states,
    /// and a 48-byte `inet_diag_sockid` left zero).
    const REQUEST: usize = 16 + 56;
    /// `struct inet_diag_msg`: the inode is its last field.
    const MSG: usize = 72;

    pub fn listening() -> std::io::Result<BTreeMap<u64, SocketAddr>> {
        let fd = super::netlink_socket(libc::NETLINK_SOCK_DIAG)?;
        let mut out = BTreeMap::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            dump(&fd, family, &mut out)?;
        }
        Ok(out)
    }

    fn dump(
        fd: &std::os::fd::OwnedFd,
        family: u8,
        out: &mut BTreeMap<u64, SocketAddr>,
    ) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut req = [0u8; REQUEST];
        req[0..4].copy_from_slice(&(REQUEST as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        req[6..8].copy_from_slice(&flags.to_ne_bytes());
        req[16] = family;
        req[17] = libc::IPPROTO_TCP as u8;
        req[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
        // SAFETY: sends the request buffer to the kernel (the default destination).
        if unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: receives into the buffer it is given.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut rest = &buf[..n as usize];
            while rest.len() >= 16 {
                let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap_or_default()) as usize;
                let kind = u16::from_ne_bytes([rest[4], rest[5]]);
                if len < 16 || len > rest.len() {
                    return Err(std::io::Error::other("sock_diag: a message cut short"));
                }
                match kind {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => return Err(std::io::Error::other("sock_diag refused the dump")),
                    _ if len >= 16 + MSG => {
                        if let Some((inode, addr)) = entry(&rest[16..16 + MSG]) {
                            out.insert(inode, addr);
                        }
                    }
                    _ => {}
                }
                // Messages are 4-byte aligned.
                rest = &rest[((len + 3) & !3).min(rest.len())..];
            }
        }
    }

    /// One `struct inet_diag_msg`: the local address and the inode.
    fn entry(m: &[u8]) -> Option<(u64, SocketAddr)> {
        let port = u16::from_be_bytes([m[4], m[5]]);
        let ip = match m[0] as i32 {
            libc::AF_INET => IpAddr::V4(Ipv4Addr::new(m[8], m[9], m[10], m[11])),
            libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&m[8..24]).ok()?)),
            _ => return None,
        };
        let inode = u32::from_ne_bytes(m[68..72].try_into().ok()?);
        Some((inode as u64, SocketAddr::new(ip, port)))
    }

    #[cfg(test)]
    mod tests {
        /// The kernel's answer is /proc's, for a listener of each family (other tests open and
        /// close theirs meanwhile: only these two are compared).
        #[test]
        fn the_listeners_are_the_ones_proc_lists() {
            let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let v6 = std::net::TcpListener::bind("[::1]:0").ok();
            let asked = super::listening().expect("sock_diag answers an unprivileged dump");
            let read = super::super::listening_from_proc().unwrap();
            let mine = [
                Some(v4.local_addr().unwrap()),
                v6.map(|l| l.local_addr().unwrap()),
            ];
            for a in mine.into_iter().flatten() {
                let inode = read.iter().find(|(_, x)| **x == a).map(|(i, _)| *i);
                assert!(inode.is_some(), "{a} not in /proc's {read:?}");
                assert_eq!(
                    asked.iter().find(|(_, x)| **x == a).map(|(i, _)| *i),
                    inode,
                    "{a}: sock_diag's {asked:?}"
                );
            }
            // A connected socket is no listener.
            let c = std::net::TcpStream::connect(v4.local_addr().unwrap()).unwrap();
            let after = super::listening().unwrap();
            assert!(!after.values().any(|x| *x == c.local_addr().unwrap()));
        }
    }
}
