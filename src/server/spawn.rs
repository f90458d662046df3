//! Starting the server's process, born where it belongs.
//!
//! Where witness has made the tree's cgroup ([`super::cgroup`]), the child is created in it with
//! `clone3(CLONE_INTO_CGROUP)`. Moving a process that already runs (a write to `cgroup.procs`
//! between fork and exec) makes the kernel wait for an RCU grace period: a third of a millisecond
//! on a quiet machine, tens of milliseconds on a busy one, which was most of `wrap -- true`'s time.
//! On x86-64 it is also a vfork (`CLONE_VM | CLONE_VFORK`, the child on a stack of its own until its
//! exec), with or without a cgroup: a fork's copy of witness's page tables took 0.2–1.6 ms.
//! `CLONE_PIDFD` gives a descriptor that becomes readable when the child exits, so the runtime waits
//! on it with no thread and no SIGCHLD bookkeeping; the status is then taken by pid, which the
//! subreaper's loop never takes ([`super::reaper`]).
//!
//! Where clone3 cannot do it (a kernel before 5.7, a seccomp profile that refuses clone3, a cgroup
//! the kernel will not start a process in), it forks as before and the child moves itself into the
//! cgroup before exec; the pidfd then comes from `pidfd_open`, or a blocking wait stands in.
//!
//! Between the fork and the exec the child runs only async-signal-safe calls on data prepared before
//! (the parent has other threads, whose locks the child inherits held): no allocation, no lock.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// What the child's stdin is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Input {
    /// /dev/null.
    Null,
    /// witness's own (a terminal, or `--stdin inherit`).
    Inherit,
    /// A pipe from witness (the stdio relay).
    Piped,
}

/// How to start the child.
pub struct Spec<'a> {
    pub argv: &'a [String],
    pub input: Input,
    /// The cgroup folder the child starts in, when witness made one.
    pub cgroup: Option<&'a Path>,
    /// The open-file limit the child gets back (witness may have raised its own).
    pub nofile: Option<libc::rlimit>,
    /// Give the child's new process group the terminal's foreground (stdin is a terminal witness
    /// holds in the foreground).
    pub foreground: bool,
}

/// A started child: its pid, witness's ends of its pipes, and how to wait for it.
pub struct Child {
    pub pid: u32,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    pidfd: Option<tokio::io::unix::AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Waits for the child to exit and takes its status (once; later calls return it again).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let pid = self.pid as libc::pid_t;
        let status = match &self.pidfd {
            Some(fd) => {
                // Readable once the child has exited; the status is then there to take.
                let _ready = fd.readable().await?;
                // Taken at once, on this thread; a thread of the blocking pool only in case the
                // status is somehow not there yet.
                match try_wait_pid(pid)? {
                    Some(s) => Ok(s),
                    None => tokio::task::spawn_blocking(move || wait_pid(pid)).await?,
                }
            }
            None => tokio::task::spawn_blocking(move || wait_pid(pid)).await?,
        }?;
        self.status = Some(status);
        Ok(status)
    }
}

/// `waitpid(WNOHANG)` for one child: its status if it has exited, `None` if it still runs.
fn try_wait_pid(pid: libc::pid_t) -> std::io::Result<Option<ExitStatus>> {
    waitpid(pid, libc::WNOHANG)
}

/// `waitpid` for one child, through EINTR.
pub(super) fn wait_pid(pid: libc::pid_t) -> std::io::Result<ExitStatus> {
    // A blocking waitpid returns only with a status (or an error).
    waitpid(pid, 0)?.ok_or_else(|| std::io::Error::other("waitpid returned no status"))
}

/// `waitpid(pid, flags)` through EINTR: the status, or `None` where WNOHANG found it running.
fn waitpid(pid: libc::pid_t, flags: libc::c_int) -> std::io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes one int through a valid pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r == pid {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Everything the child touches, made before the fork.
struct Prepared {
    program: CString,
    /// NUL-terminated pointers into `_args`.
    argv: Vec<*const libc::c_char>,
    _args: Vec<CString>,
    /// The child's ends: stdin (None: witness's own), stdout, stderr, all numbered 3 or above.
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    /// Written by the child when exec fails: its errno.
    report: OwnedFd,
    nofile: Option<libc::rlimit>,
    foreground: bool,
    parent: libc::pid_t,
    /// `cgroup.procs` to write "0" to, when the child moves itself there (the fork path).
    procs: Option<CString>,
}

/// A pipe whose both ends are numbered 3 or above (so that putting one child end on 0, 1 or 2
/// never closes another) and close on exec.
pub(super) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on an open fd returns a new one or -1.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a NUL byte in the command",
        )
    })
}

/// Starts the child. The error is the exec's (ENOENT, EACCES …) or a failed fork's.
pub fn spawn(spec: &Spec) -> std::io::Result<Child> {
    spawn_by(spec, true)
}

/// [`spawn`], with clone3 into the cgroup tried or not (the fork path, for its tests).
fn spawn_by(spec: &Spec, try_clone3: bool) -> std::io::Result<Child> {
    let args: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| cstring(OsStr::new(a)))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let (stdin_child, stdin_ours) = match spec.input {
        Input::Inherit => (None, None),
        Input::Null => {
            let f = std::fs::File::open("/dev/null")?;
            (Some(above_stdio(OwnedFd::from(f))?), None)
        }
        Input::Piped => {
            let (r, w) = pipe()?;
            (Some(r), Some(w))
        }
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    // A cgroup folder that cannot be opened is still tried by the fork path (cgroup.procs).
    let cgroup_dir = spec
        .cgroup
        .and_then(|dir| std::fs::File::open(dir).ok())
        .map(OwnedFd::from);
    let mut prepared = Prepared {
        program: args[0].clone(),
        argv,
        _args: args,
        stdin: stdin_child,
        stdout: out_w,
        stderr: err_w,
        report: report_w,
        nofile: spec.nofile,
        foreground: spec.foreground,
        parent: std::process::id() as libc::pid_t,
        procs: None,
    };
    // clone3 with no cgroup too (a user's run without root): as a vfork it copies nothing. A
    // cgroup that could not be opened is left to the fork path, whose child moves itself there.
    let cloned = (try_clone3 && (spec.cgroup.is_none() || cgroup_dir.is_some()))
        .then(|| clone_into(&prepared, cgroup_dir.as_ref()))
        .flatten();
    let (pid, pidfd) = match cloned {
        Some(started) => started?,
        None => {
            prepared.procs = match spec.cgroup {
                Some(dir) => Some(cstring(dir.join("cgroup.procs").as_os_str())?),
                None => None,
            };
            fork(&prepared)?
        }
    };
    // The child's ends are the child's now; the report pipe ends at its exec.
    drop(prepared);
    if let Some(errno) = read_report(&report_r) {
        let _ = wait_pid(pid);
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    // SAFETY: the OwnedFd is open and moves into the AsyncFd, which alone closes it. Where it
    // cannot be registered, a blocking wait stands in.
    let pidfd = pidfd.and_then(|fd| unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE).ok()
    });
    Ok(Child {
        pid: pid as u32,
        stdin: stdin_ours,
        stdout: Some(out_r),
        stderr: Some(err_r),
        pidfd,
        status: None,
    })
}

/// The child's errno if its exec failed; None once the exec closed the pipe.
fn read_report(fd: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        // SAFETY: reads into the rest of a local buffer.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                4 - got,
            )
        };
        match n {
            0 => return None,
            n if n > 0 => got += n as usize,
            _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return None,
        }
    }
    Some(i32::from_ne_bytes(buf))
}

/// The kernel's `struct clone_args` (CLONE_ARGS_SIZE_VER2: with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// clone3, into the cgroup when there is one; None where the kernel cannot (then the caller forks).
fn clone_into(
    p: &Prepared,
    cgroup: Option<&OwnedFd>,
) -> Option<std::io::Result<(libc::pid_t, Option<OwnedFd>)>> {
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        // Handlers reset in the child: a signal before its exec must not run witness's handler
        // (the runtime's, which writes to a pipe the parent shares).
        flags: CLONE_PIDFD | CLONE_CLEAR_SIGHAND,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    let pid = clone3(&mut args, p);
    if pid < 0 {
        return None;
    }
    // SAFETY: the kernel opened it for this process.
    let fd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    Some(Ok((pid as libc::pid_t, Some(fd))))
}

/// The child's stack while it shares witness's memory (it holds `child`'s frame and execvp's
/// search of PATH).
#[cfg(target_arch = "x86_64")]
const CHILD_STACK: usize = 256 * 1024;

/// clone3 as vfork does it: the child shares witness's memory on a stack of its own, and this
/// thread waits until the child has exec'd or exited, so nothing is copied: the copy of witness's
/// page tables that a fork makes took from 0.2 to 1.6 ms. Returns the pid, or -1.
#[cfg(target_arch = "x86_64")]
fn clone3(args: &mut CloneArgs, p: &Prepared) -> libc::c_long {
    extern "C" fn entry(p: *const Prepared) -> ! {
        // SAFETY: `p` outlives the child's use of it: the parent waits (vfork) until the exec.
        unsafe { child(&*p) }
    }
    // SAFETY: a private anonymous mapping, unmapped below once the child no longer runs on it.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHILD_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return -1;
    }
    args.flags |= CLONE_VM | CLONE_VFORK;
    args.stack = stack as u64;
    args.stack_size = CHILD_STACK as u64;
    // No signal reaches the child before its handlers are reset (CLONE_CLEAR_SIGHAND) and it
    // unblocks them itself; this thread's mask comes back after.
    // SAFETY: sigset_t filled by sigfillset; masks of this thread only.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let ret: libc::c_long;
    // SAFETY: the raw clone3 syscall. The parent gets the pid (or -errno) in rax and carries on.
    // The child starts on the new stack with the parent's registers but rax = 0: it calls
    // `entry(p)` (r12, r13 survive the syscall) and never returns; the kernel holds the parent
    // until the child execs or exits (CLONE_VFORK), so `p` and this frame stay put meanwhile.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") p as *const Prepared,
            in("r13") entry as extern "C" fn(*const Prepared) -> !,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::munmap(stack, CHILD_STACK);
    }
    if ret < 0 {
        -1
    } else {
        ret
    }
}

/// clone3 as fork does it (elsewhere than x86-64): the child gets a copy of witness's memory and
/// runs `child` on it. Returns the pid, or -1.
#[cfg(not(target_arch = "x86_64"))]
fn clone3(args: &mut CloneArgs, p: &Prepared) -> libc::c_long {
    // SAFETY: without CLONE_VM this is a fork: the child returns here with a copy of this stack
    // and runs only `child`, which execs or exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        unsafe { child(p) }
    }
    pid
}

/// fork, then a pidfd for the child where the kernel has pidfd_open (5.3).
fn fork(p: &Prepared) -> std::io::Result<(libc::pid_t, Option<OwnedFd>)> {
    // SAFETY: the child runs only `child`, which execs or exits.
    let pid = unsafe { libc::fork() };
    match pid {
        0 => unsafe { child(p) },
        -1 => Err(std::io::Error::last_os_error()),
        pid => {
            // SAFETY: pidfd_open takes a pid and flags; a zombie child still has its pidfd.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            // SAFETY: opened for this process when not -1.
            let fd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
            Ok((pid, fd))
        }
    }
}

/// The child, between fork and exec: async-signal-safe calls only.
unsafe fn child(p: &Prepared) -> ! {
    let fail = |errno: i32| -> ! {
        let b = errno.to_ne_bytes();
        libc::write(p.report.as_raw_fd(), b.as_ptr() as *const libc::c_void, 4);
        libc::_exit(127)
    };
    let errno = || *libc::__errno_location();
    if let Some(fd) = &p.stdin {
        if libc::dup2(fd.as_raw_fd(), 0) < 0 {
            fail(errno());
        }
    }
    if libc::dup2(p.stdout.as_raw_fd(), 1) < 0 || libc::dup2(p.stderr.as_raw_fd(), 2) < 0 {
        fail(errno());
    }
    // Its own process group, so signals to the group reach the whole server and not witness.
    if libc::setpgid(0, 0) != 0 {
        fail(errno());
    }
    // What exec keeps: the signal mask (witness's threads may block some) and ignored signals
    // (Rust ignores SIGPIPE); a server expects neither.
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    if let Some(l) = &p.nofile {
        libc::setrlimit(libc::RLIMIT_NOFILE, l);
    }
    // If witness dies, even by SIGKILL, the kernel kills the child.
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
        fail(errno());
    }
    // witness may have died between fork and prctl: then nobody would kill us later.
    if libc::getppid() != p.parent {
        libc::_exit(137);
    }
    // Into the tree's cgroup before exec, so every descendant is in it too (the fork path).
    if let Some(path) = &p.procs {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1);
            libc::close(fd);
        }
    }
    // Job control as a shell does it: the new group takes the terminal, with SIGTTOU blocked for
    // the call.
    if p.foreground {
        let mut block: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &block, std::ptr::null_mut());
        libc::tcsetpgrp(0, libc::getpid());
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    libc::execvp(p.program.as_ptr(), p.argv.as_ptr());
    fail(errno())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn spec<'a>(argv: &'a [String], cgroup: Option<&'a Path>) -> Spec<'a> {
        Spec {
            argv,
            input: Input::Piped,
            cgroup,
            nofile: None,
            foreground: false,
        }
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    fn read_all(fd: Option<OwnedFd>) -> String {
        let mut s = String::new();
        std::fs::File::from(fd.unwrap())
            .read_to_string(&mut s)
            .unwrap();
        s
    }

    /// By clone3 and by the fork path alike.
    #[tokio::test]
    async fn the_child_reads_its_stdin_and_its_outputs_and_status_come_back() {
        let argv = words(&["sh", "-c", "read x; echo \"out $x\"; echo err >&2; exit 3"]);
        for clone3 in [true, false] {
            let mut c = spawn_by(&spec(&argv, None), clone3).unwrap();
            std::fs::File::from(c.stdin.take().unwrap())
                .write_all(b"hi\n")
                .unwrap();
            assert_eq!(read_all(c.stdout.take()), "out hi\n");
            assert_eq!(read_all(c.stderr.take()), "err\n");
            assert_eq!(c.wait().await.unwrap().code(), Some(3));
            // Taken once, said again.
            assert_eq!(c.wait().await.unwrap().code(), Some(3));
        }
    }

    #[tokio::test]
    async fn a_signal_that_ends_the_child_is_its_status() {
        let argv = words(&["sh", "-c", "kill -TERM $$"]);
        let mut c = spawn(&spec(&argv, None)).unwrap();
        assert_eq!(c.wait().await.unwrap().signal(), Some(libc::SIGTERM));
    }

    #[tokio::test]
    async fn an_exec_that_fails_is_the_spawn_s_error() {
        let missing = words(&["/nonexistent/witness-test-program"]);
        for clone3 in [true, false] {
            let e = spawn_by(&spec(&missing, None), clone3).err().unwrap();
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        }
        let file = std::env::temp_dir().join(format!("witness-spawn-{}", std::process::id()));
        std::fs::write(&file, "not a program").unwrap();
        let not_a_program = vec![file.to_string_lossy().to_string()];
        let e = spawn(&spec(&not_a_program, None)).err().unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    }

    /// Both ways of starting the child put it in the cgroup before its program runs: clone3 into
    /// it, and the fork whose child moves itself.
    #[tokio::test]
    async fn the_child_runs_in_the_tree_s_cgroup_by_either_path() {
        let on_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        for (n, clone3) in [(9001, true), (9002, false)] {
            let Some(cg) = crate::server::cgroup::Cgroup::create(n) else {
                assert!(
                    !on_ci,
                    "CI runs as root on cgroup v2: witness must make a cgroup"
                );
                eprintln!("NOTE: no cgroup here (not root, or no cgroup v2): not tested");
                return;
            };
            let argv = words(&["cat", "/proc/self/cgroup"]);
            let mut c = spawn_by(&spec(&argv, Some(&cg.dir)), clone3).unwrap();
            let out = read_all(c.stdout.take());
            c.wait().await.unwrap();
            let name = cg.dir.file_name().unwrap().to_string_lossy().to_string();
            let v2 = out.lines().find(|l| l.starts_with("0::")).unwrap_or("");
            assert!(
                v2.ends_with(&format!("/{name}")),
                "clone3 {clone3}: the child ran in {v2:?}, not in {name}"
            );
            cg.kill_all();
        }
    }
}
