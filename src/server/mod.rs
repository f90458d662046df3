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

/// Every listening TCP socket (IPv4 and IPv6) by its inode, from /proc/net/tcp{,6}; an error only
/// when neither table could be read (not "nothing listens").
fn listening() -> Result<std::collections::BTreeMap<u64, std::net::SocketAddr>, String> {
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
