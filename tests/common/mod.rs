//! Shared helpers for the integration tests: the real witness binary, the real example servers
//! (built by `cargo test` from examples/), fresh loopback ports, and bounded waits.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn witness() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_witness"))
}

/// The example HTTP server (examples/toy_server.rs), built with the tests.
pub fn toy() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toy_server"))
}

/// The output flood (examples/spew.rs), built with the tests.
pub fn spew() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_spew"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A loopback port nothing listens on right now, and that nothing else will take meanwhile.
///
/// Taken *below* the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), because a port the
/// kernel hands to `bind(…:0)` is also one it may hand, a moment later, to an outgoing connection's
/// local end (every load test makes thousands) or to another test's `bind(0)`: a server told to bind
/// it a second later then fails with "Address already in use". Below that range only a port named
/// explicitly is ever bound, and within this test binary a counter hands each port out once; the
/// start of the walk is spread by the process id so that test binaries (and their leftover servers)
/// stay apart. Each candidate is checked free by binding it on 127.0.0.1 and [::1].
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    // Ports 10000.. below the ephemeral range; a machine whose range starts too low for that keeps
    // the kernel's choice.
    let (base, span) = (10_000u32, low.saturating_sub(10_000));
    if span < 1000 {
        return TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let start = std::process::id().wrapping_mul(977) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (base + (start + n) % span) as u16;
        let v4 = TcpListener::bind(("127.0.0.1", port)).is_ok();
        let v6 = v4
            && TcpListener::bind(("::1", port)).map_or_else(
                // No IPv6 loopback at all counts as free.
                |e| e.kind() != std::io::ErrorKind::AddrInUse,
                |_| true,
            );
        if v4 && v6 {
            return port;
        }
    }
    panic!("no free loopback port in {base}..{}", base + span);
}

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "witness-it-{tag}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ rand_u64()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rand_u64() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish() as u128
}

/// Runs to completion, killing it (and failing) past `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_bounded(child, limit)
}

/// Waits for the child with a deadline, draining its stdout and stderr *while it runs* (a chatty
/// child must not block on a full pipe and hang the test). Past `limit` — the child still running, or
/// a descendant still holding its pipes open — the child is killed and the test fails with the output
/// read so far.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    type Sink = Arc<Mutex<Vec<u8>>>;
    let drain = |pipe: Option<Box<dyn Read + Send>>| -> (Sink, std::thread::JoinHandle<()>) {
        let sink: Sink = Arc::default();
        let s = sink.clone();
        let h = std::thread::spawn(move || {
            let Some(mut p) = pipe else { return };
            let mut buf = [0u8; 8192];
            while let Ok(n) = p.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        (sink, h)
    };
    let (out, out_h) = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let (err, err_h) = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let mut status = None;
    loop {
        if status.is_none() {
            status = child.try_wait().unwrap();
        }
        if status.is_some() && out_h.is_finished() && err_h.is_finished() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let why = if status.is_some() {
                "exited, but a descendant still holds its output open"
            } else {
                "still running"
            };
            panic!(
                "{why} after {limit:?}; stderr so far:\n{}",
                String::from_utf8_lossy(&err.lock().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let take = |s: Sink| std::mem::take(&mut *s.lock().unwrap());
    Output {
        status: status.unwrap(),
        stdout: take(out),
        stderr: take(err),
    }
}

/// Waits for a condition with a deadline; panics naming what it waited for.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every line of a journal, parsed.
pub fn journal_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| journal_value(l).unwrap_or_else(|| panic!("bad journal line {l:?}")))
        .collect()
}

/// One journal line read by witness's own reader and shown in the long form (`kind`, `start_s`,
/// `outcome.kind`...), whichever form it was written in (requests are written compactly); the
/// header as it is. None for a line that is neither (cut off mid-write).
#[allow(dead_code)]
pub fn journal_value(line: &str) -> Option<serde_json::Value> {
    match witness::journal::codec::decode(line.as_bytes()) {
        Ok(rec) => Some(serde_json::to_value(rec).expect("a record is JSON")),
        Err(_) => serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .filter(|v| v["kind"] == "header"),
    }
}

pub fn alive(pid: i32) -> bool {
    // Signal 0 probes; a zombie still "exists", so read its state too.
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = st
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next();
    !st.is_empty() && state != Some("Z") && state != Some("X")
}

/// A server started by the test itself (attach mode), killed with its process group on drop.
pub struct Bg(pub Child);

impl Bg {
    pub fn start(cmd: &mut Command) -> Self {
        use std::os::unix::process::CommandExt;
        Bg(cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn background server"))
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        unsafe {
            libc_kill(-(self.0.id() as i32), 9);
        }
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Two busy loops beside the test (a busy machine), stopped on drop (the field is held for that).
pub struct Hogs(#[allow(dead_code)] Vec<Bg>);

impl Hogs {
    pub fn start() -> Self {
        Hogs(
            (0..2)
                .map(|_| Bg::start(Command::new("sh").args(["-c", "while :; do :; done"])))
                .collect(),
        )
    }
}

pub fn kill(pid: i32, sig: i32) {
    unsafe {
        libc_kill(pid, sig);
    }
}

/// Waits until something answers on the port.
pub fn wait_listening(port: u16) {
    wait_until(
        &format!("a listener on port {port}"),
        Duration::from_secs(10),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
}

/// Whether this is CI, where a missing tool is a broken setup, not a reason to skip: `CI` set to
/// anything but empty, `0` or `false` (CI systems set `true`, `1`, `yes` …).
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no"
        )
    })
}

/// Says a test did not run, where `cargo test`'s output shows it even for a passing test (libtest
/// captures `eprintln!`, not a direct write to the process's stderr).
pub fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED {why} ***");
}

/// Whether `check` (a shell line) succeeds; without it the test is skipped, or fails on CI.
pub fn have(what: &str, check: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", check])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            !on_ci(),
            "{what} is missing on CI (`{check}` failed): .ci/run must install it"
        );
        skipped(&format!("{what} is not installed (`{check}` failed)"));
    }
    ok
}

/// One of the Python programs in examples/py/.
pub fn py(name: &str) -> PathBuf {
    repo().join("examples/py").join(name)
}

/// The official MCP SDK client launches `witness wrap -- python3 stdio_mcp.py` (as an agent launches
/// its MCP server); returns the client's stdout, witness's journal and report.
pub fn sdk_session(tag: &str, calls: u32, env: &[(&str, &str)]) -> (String, PathBuf, PathBuf) {
    let dir = tempdir(tag);
    let (journal, report) = (dir.join("j.jsonl"), dir.join("r.json"));
    let mut cmd = Command::new("python3");
    cmd.arg(py("mcp_client.py"))
        .arg(calls.to_string())
        .arg(witness())
        .args(["wrap", "--journal"])
        .arg(&journal)
        .arg("--report")
        .arg(&report)
        .args(["--", "python3"])
        .arg(py("stdio_mcp.py"))
        .envs(env.iter().copied());
    let out = run_bounded(&mut cmd, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!(
        "client stdout:\n{stdout}\nclient+witness stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, journal, report)
}

/// A program on the PATH or in one of `also` (e.g. /usr/sbin for nginx); without it the test is
/// skipped, or fails on CI (`.ci/run` installs it).
pub fn tool(name: &str, also: &[&str]) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(also.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            !on_ci(),
            "{name} is not installed: .ci/run installs it, so CI must have it"
        );
        skipped(&format!("{name} is not installed (.ci/run installs it)"));
    }
    found
}

/// Debian's nginx (scripts/setup.sh installs nginx-light).
pub fn nginx() -> Option<PathBuf> {
    tool("nginx", &["/usr/sbin"])
}

/// `--rounds 1` (one request per worker, the ladder's old default) unless the test says how long a
/// level is (`--rounds`, `--duration`, `--rates`).
pub fn per_worker(args: &[&str]) -> &'static [&'static str] {
    let timed = args
        .iter()
        .any(|a| ["--rounds", "--duration", "--rates"].contains(a));
    if timed {
        &[]
    } else {
        &["--rounds", "1"]
    }
}

/// A process's start time (clock ticks since boot, /proc/PID/stat field 22), which tells it from a
/// later process given the same pid.
fn start_ticks(pid: i32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    st.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The pids of `pid`'s descendants, read from /proc now.
pub fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| {
            let st = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let ppid = st
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// SIGKILL to a process the test started and to every descendant it has now, if it is still that
/// process (same start time).
fn kill_tree_if(pid: i32, started: Option<u64>) {
    if started.is_none() || start_ticks(pid) != started {
        return;
    }
    let below = descendants(pid);
    kill(pid, 9);
    for p in below {
        kill(p, 9);
    }
}

/// Kills a process the test started, and what it started, when the test ends before it did (a failed
/// assertion or a timed-out wait must not leave `witness` and its server running).
pub struct KillTree {
    pid: i32,
    started: Option<u64>,
}

impl KillTree {
    pub fn new(pid: i32) -> Self {
        KillTree {
            pid,
            started: start_ticks(pid),
        }
    }
}

impl Drop for KillTree {
    fn drop(&mut self) {
        kill_tree_if(self.pid, self.started);
    }
}

/// Kills `pid` and its descendants past `limit` unless dropped first: a test blocked reading from a
/// process that will never write again (bytes lost on the way) fails within its own deadline,
/// instead of hanging until the runner stops it.
pub struct Deadline(Option<std::sync::mpsc::Sender<()>>);

pub fn kill_after(pid: i32, limit: Duration) -> Deadline {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let started = start_ticks(pid);
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "deadline: pid {pid} still running after {limit:?}: killed with what it started"
            );
            kill_tree_if(pid, started);
        }
    });
    Deadline(Some(tx))
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Dropping the sender ends the wait: nothing is killed.
        self.0.take();
    }
}

/// A duration as every view of witness shows it: the unit that fits (µs, ms, s), three figures
/// below a second, milliseconds above ("85µs", "1.24ms", "12.5ms", "240ms", "2.414s", "85.03s").
pub fn shown_duration(s: f64) -> String {
    match s {
        s if s < 0.000_999_5 => format!("{:.0}µs", s * 1e6),
        s if s < 0.009_995 => format!("{:.2}ms", s * 1e3),
        s if s < 0.099_95 => format!("{:.1}ms", s * 1e3),
        s if s < 0.999_5 => format!("{:.0}ms", s * 1e3),
        s if s < 9.999_5 => format!("{s:.3}s"),
        s if s < 99.995 => format!("{s:.2}s"),
        s => format!("{s:.1}s"),
    }
}

/// An nginx configuration in `dir`: listen on `port`, proxy to 127.0.0.1:`upstream` with
/// `proxy_read_timeout` `timeout`, in the foreground, its temporary files in `dir`.
pub fn nginx_proxy_conf(dir: &Path, port: &str, upstream: &str, timeout: &str) -> PathBuf {
    let d = dir.display();
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_read_timeout {timeout};
    }}
  }}
}}
"#
    );
    let p = dir.join(format!("nginx-{timeout}.conf"));
    std::fs::write(&p, conf).unwrap();
    p
}
