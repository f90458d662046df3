//! `toy_server`: a small HTTP/1.1 server that misbehaves on purpose, used as a target for
//! `witness` examples, tests and demos. It reproduces the failure modes from the story of
//! the load test that measured a 90 s process watchdog instead of the server: a serialising
//! lock, a handler that never answers, a watchdog that force-exits with code 124, a
//! supervisor-style death, a bounded queue that rejects, a memory leak, a health check that
//! goes bad, and a listener whose TCP connects stall.
//!
//! It uses only the Rust standard library (plus `alarm(2)` and `listen(2)` declared by hand),
//! so it builds statically for a `FROM scratch` image:
//! `rustc -O --edition 2021 -C target-feature=+crt-static examples/toy_server.rs`.
//!
//! One thread per connection, HTTP/1.1 keep-alive (honours `Connection: close`, and
//! `Connection: keep-alive` from HTTP/1.0 clients), request bodies read fully
//! (`Content-Length` or chunked), responses always carry `Content-Length`.
//! A malformed request gets a 400 and the connection is closed.
//!
//! Routes:
//! - `GET /health`: 200 `ok` at once, even while `/call` is hung or locked (never takes the
//!   `/call` lock); 500 `unhealthy` once `--health-fail-after` is reached.
//! - `/call` (any method): behaves as `--call` says; 200 `{"ok":true}` when it answers.
//! - `/echo` (any method): 200 with the request's body sent back as it is read, in chunks
//!   (`Transfer-Encoding: chunked`, the one route without `Content-Length`), so a body of any
//!   size passes both ways at once through whatever sits between (a proxy under test).
//! - `GET /stats`: 200 `{"requests":N,"in_flight":N,"leaked_bytes":N,"queued":N}`, where
//!   `requests` counts every request received, `in_flight` the `/call` requests being
//!   served (hung ones included), and `queued` the `/call` requests waiting for the lock.
//! - anything else: 404.
//!
//! Flags (durations: `500ms`, `2s`, `1.5s`, `1m`, `1h`, or bare seconds; sizes: bytes, or
//! with a `k`/`m`/`g` suffix meaning KiB/MiB/GiB; `--flag value` or `--flag=value`):
//! - `--port N`: TCP port (default 8080; 0 picks a free one, and the line below says which).
//! - `--bind IP`: address to bind (default 127.0.0.1; use 0.0.0.0 in a container).
//!   On success prints `toy_server listening on http://IP:PORT` to stdout.
//! - `--call MODE`: `fast` (default, answer at once), `hang` (read the request, then never
//!   answer; the connection stays open), `lock:DUR` (serialise on one global mutex, hold it
//!   DUR, then answer), `sleep:DUR` (sleep DUR without the lock, then answer), `redirect`
//!   (302 to /login), `big:SIZE` (200 with a SIZE-byte body, streamed), `stall-body` (status,
//!   headers and 10 of the 1000 promised body bytes, then nothing more).
//! - `--watchdog DUR`: after DUR print `[oi] process watchdog: force-exiting after DUR
//!   (exit 124)` to stderr and exit with code 124.
//! - `--alarm SECS`: call `alarm(SECS)` at startup, so SIGALRM kills the process silently.
//! - `--die-after DUR`: exit silently after DUR, with code `--die-code N` (default 1).
//! - `--ready-delay DUR`: sleep DUR before binding (a slow start).
//! - `--capacity N`: with more than N `/call` requests in flight, answer at once with 429
//!   `{"error":"QUEUE_FULL"}`; `--reject-status CODE` uses CODE (e.g. 503) instead of 429, and
//!   `--reject-body TEXT` answers TEXT instead of the QUEUE_FULL body (a plain refusal, no marker).
//! - `--leak BYTES`: every `/call` allocates BYTES, touches every page, and keeps it forever.
//! - `--health-fail-after N`: after N `/call` requests have been answered with 200,
//!   `/health` answers 500 `unhealthy`.
//! - `--require-secret-env NAME`: `/call` needs `Authorization: Bearer <$NAME>`, otherwise
//!   401 `{"error":"bad credentials"}`. Exits 2 at startup if NAME is unset or empty. The
//!   secret is never printed.
//! - `--require-header-env NAME=VAR` (repeatable): `/call` needs header NAME to equal `$VAR`
//!   (a cookie, an API key), otherwise 401. Exits 2 at startup if VAR is unset or empty.
//! - `--access-log`: print `METHOD PATH STATUS` to stdout for every answered request.
//! - `--max-conns N`: with more than N connections open, a further connection's requests are
//!   answered at once with 503 `too many connections` and the connection is closed (a server
//!   with a small connection limit, like a pool of N workers behind an accept gate).
//! - `--never-accept`: bind and listen with the smallest backlog, fill the accept queue
//!   with connections to itself, print the listening line, and never call accept, so
//!   further TCP connects stall.
//! - `--stall-once N:DUR`: when the Nth `/call` request arrives, the server stalls for DUR once:
//!   that request and every `/call` arriving before the stall ends wait until it ends (a
//!   stop-the-world pause), then are answered as `--call` says.
//! - `--help`: print usage and exit 0.
//!
//! A bad flag or value prints an error naming the flag and exits 2.

use std::env;
use std::ffi::{c_int, c_uint};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::process;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

extern "C" {
    fn alarm(seconds: c_uint) -> c_uint;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
}

const USAGE: &str = "\
usage: toy_server [FLAGS]

  --port N                    TCP port (default 8080; 0 = any free port)
  --bind IP                   bind address (default 127.0.0.1; 0.0.0.0 in containers)
  --call MODE                 /call behaviour: fast (default) | hang | lock:DUR | sleep:DUR
                              | redirect (302) | big:SIZE (a SIZE-byte body) | stall-body
                              (status and 10 of 1000 body bytes, then nothing)
  --watchdog DUR              after DUR log '[oi] process watchdog: ...' and exit 124
  --alarm SECS                alarm(SECS) at startup: SIGALRM kills the process silently
  --die-after DUR             exit silently after DUR ...
  --die-code N                ... with this exit code (default 1)
  --ready-delay DUR           sleep DUR before binding
  --capacity N                more than N /call in flight -> 429 {\"error\":\"QUEUE_FULL\"}
  --reject-status CODE        status used by --capacity instead of 429 (e.g. 503)
  --reject-body TEXT          body used by --capacity instead of {\"error\":\"QUEUE_FULL\"}
  --leak BYTES                every /call leaks BYTES of touched memory (64k, 1m, ...)
  --health-fail-after N       /health answers 500 once N /call requests were answered
  --stall-once N:DUR          the Nth /call opens a DUR stall: every /call until its end waits
  --require-secret-env NAME   /call needs 'Authorization: Bearer $NAME' (else 401)
  --require-header-env H=VAR  /call needs header H equal to $VAR (else 401; repeatable)
  --access-log                print 'METHOD PATH STATUS' per request to stdout
  --max-conns N               over N open connections -> 503 'too many connections', closed
  --never-accept              listen with a full accept queue and never accept
  --helper-per-request CMD    run `sh -c CMD` for every /call (REQ=n in its environment, n from 1),
                              as an MCP server runs git per call; a helper that fails or prints
                              'fail' -> 500 'helper failed'
  --help                      this text

Durations: 500ms, 2s, 1.5s, 1m, 1h (bare number = seconds). Sizes: 4096, 64k, 1m, 1g.
Routes: GET /health, /call (any method), /echo (the body back, chunked), GET /stats;
anything else is 404.
";

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";
const MAX_LINE: u64 = 16 * 1024;
const MAX_HEADERS: usize = 100;
const PAGE: usize = 4096;

#[derive(Clone, Copy, Debug)]
enum CallMode {
    Fast,
    Hang,
    Lock(Duration),
    Sleep(Duration),
    /// Answer 302 to /login: a server that redirects every call.
    Redirect,
    /// Answer 200 with a body of this many bytes, streamed (never held in memory).
    Big(u64),
    /// Send the status line, headers and 10 of the 1000 promised body bytes, then never more.
    StallBody,
}

struct Config {
    port: u16,
    bind: IpAddr,
    call: CallMode,
    watchdog: Option<(Duration, String)>,
    alarm: Option<u32>,
    die_after: Option<Duration>,
    die_code: i32,
    ready_delay: Option<Duration>,
    capacity: Option<u64>,
    max_conns: Option<u64>,
    reject_status: u16,
    reject_body: String,
    leak: usize,
    health_fail_after: Option<u64>,
    secret_env: Option<String>,
    /// `--require-header-env NAME=VAR`: header NAME must equal $VAR on /call.
    header_env: Vec<(String, String)>,
    access_log: bool,
    never_accept: bool,
    helper: Option<String>,
    /// `--stall-once N:DUR`.
    stall_once: Option<(u64, Duration)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: 8080,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            call: CallMode::Fast,
            watchdog: None,
            alarm: None,
            die_after: None,
            die_code: 1,
            ready_delay: None,
            capacity: None,
            max_conns: None,
            reject_status: 429,
            reject_body: r#"{"error":"QUEUE_FULL"}"#.to_string(),
            leak: 0,
            health_fail_after: None,
            secret_env: None,
            header_env: Vec::new(),
            access_log: false,
            never_accept: false,
            helper: None,
            stall_once: None,
        }
    }
}

struct State {
    cfg: Config,
    secret: Option<String>,
    /// Headers /call needs (lowercase name, value), read from the environment at start.
    required: Vec<(String, String)>,
    requests: AtomicU64,
    /// `--helper-per-request` runs so far.
    helper_runs: AtomicU64,
    in_flight: AtomicU64,
    answered: AtomicU64,
    leaked_bytes: AtomicU64,
    queued: AtomicU64,
    /// Connections accepted and not yet closed (for `--max-conns`).
    open_conns: AtomicU64,
    call_lock: Mutex<()>,
    /// `/call` requests received (for `--stall-once`), and the stall's end once it began.
    calls: AtomicU64,
    stall_until: Mutex<Option<Instant>>,
    leaked: Mutex<Vec<Vec<u8>>>,
}

// ---------------------------------------------------------------------------------------
// Output helpers: never panic when stdout/stderr is closed.

fn out_line(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn err_line(line: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

fn fail(code: i32, msg: &str) -> ! {
    err_line(&format!("toy_server: {msg}"));
    process::exit(code)
}

// ---------------------------------------------------------------------------------------
// Argument parsing.

fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let x: f64 = num.trim().parse().ok()?;
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(x * mult).ok()
}

fn parse_size(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let s = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'm') => (&s[..s.len() - 1], 1u64 << 20),
        Some(b'g') => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn bad_value(flag: &str, value: &str, expected: &str) -> String {
    format!("{flag}: invalid value '{value}' (expected {expected})")
}

fn value_of(
    flag: &str,
    inline: Option<String>,
    rest: &mut impl Iterator<Item = String>,
) -> Result<String, String> {
    match inline {
        Some(v) => Ok(v),
        None => rest
            .next()
            .ok_or_else(|| format!("{flag}: missing value (see --help)")),
    }
}

fn dur_arg(flag: &str, v: &str) -> Result<Duration, String> {
    parse_duration(v).ok_or_else(|| bad_value(flag, v, "a duration like 500ms, 2s, 1.5s, 1m"))
}

fn num_arg<T: std::str::FromStr>(flag: &str, v: &str, expected: &str) -> Result<T, String> {
    v.trim().parse().map_err(|_| bad_value(flag, v, expected))
}

fn parse_call(v: &str) -> Result<CallMode, String> {
    let bad = || {
        bad_value(
            "--call",
            v,
            "fast, hang, lock:DUR, sleep:DUR, redirect, big:SIZE or stall-body, e.g. lock:1s",
        )
    };
    match v.split_once(':') {
        None if v == "fast" => Ok(CallMode::Fast),
        None if v == "hang" => Ok(CallMode::Hang),
        None if v == "redirect" => Ok(CallMode::Redirect),
        None if v == "stall-body" => Ok(CallMode::StallBody),
        Some(("big", n)) => parse_size(n).map(CallMode::Big).ok_or_else(bad),
        Some(("lock", d)) => parse_duration(d).map(CallMode::Lock).ok_or_else(bad),
        Some(("sleep", d)) => parse_duration(d).map(CallMode::Sleep).ok_or_else(bad),
        _ => Err(bad()),
    }
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Config, String> {
    let mut cfg = Config::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let is_switch = matches!(
            flag.as_str(),
            "--help" | "-h" | "--access-log" | "--never-accept"
        );
        if is_switch && inline.is_some() {
            return Err(format!("{flag}: takes no value"));
        }
        let f = flag.as_str();
        match f {
            "--help" | "-h" => {
                let mut out = io::stdout().lock();
                let _ = out.write_all(USAGE.as_bytes());
                let _ = out.flush();
                process::exit(0);
            }
            "--access-log" => cfg.access_log = true,
            "--never-accept" => cfg.never_accept = true,
            "--port" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.port = num_arg(f, &v, "a port number 0-65535")?;
            }
            "--bind" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.bind = num_arg(f, &v, "an IP address such as 127.0.0.1 or 0.0.0.0")?;
            }
            "--call" => cfg.call = parse_call(&value_of(f, inline, &mut it)?)?,
            "--watchdog" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.watchdog = Some((dur_arg(f, &v)?, v.trim().to_string()));
            }
            "--alarm" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.alarm = Some(num_arg(f, &v, "a whole number of seconds")?);
            }
            "--die-after" => cfg.die_after = Some(dur_arg(f, &value_of(f, inline, &mut it)?)?),
            "--die-code" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.die_code = num_arg(f, &v, "an exit code 0-255")?;
            }
            "--ready-delay" => {
                cfg.ready_delay = Some(dur_arg(f, &value_of(f, inline, &mut it)?)?);
            }
            "--max-conns" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.max_conns = Some(num_arg(f, &v, "a number of connections")?);
            }
            "--capacity" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.capacity = Some(num_arg(f, &v, "a number of requests")?);
            }
            "--reject-status" => {
                let v = value_of(f, inline, &mut it)?;
                let code: u16 = num_arg(f, &v, "an HTTP status code 100-599")?;
                if !(100..=599).contains(&code) {
                    return Err(bad_value(f, &v, "an HTTP status code 100-599"));
                }
                cfg.reject_status = code;
            }
            "--reject-body" => {
                cfg.reject_body = value_of(f, inline, &mut it)?;
            }
            "--leak" => {
                let v = value_of(f, inline, &mut it)?;
                let bytes = parse_size(&v)
                    .and_then(|b| usize::try_from(b).ok())
                    .ok_or_else(|| bad_value(f, &v, "a size like 4096, 64k or 1m"))?;
                cfg.leak = bytes;
            }
            "--health-fail-after" => {
                let v = value_of(f, inline, &mut it)?;
                cfg.health_fail_after = Some(num_arg(f, &v, "a number of /call requests")?);
            }
            "--require-secret-env" => {
                let v = value_of(f, inline, &mut it)?;
                if v.is_empty() || v.contains('=') || v.contains('\0') {
                    return Err(bad_value(f, &v, "an environment variable name"));
                }
                cfg.secret_env = Some(v);
            }
            "--require-header-env" => {
                let v = value_of(f, inline, &mut it)?;
                match v.split_once('=') {
                    Some((name, var)) if !name.is_empty() && !var.is_empty() => cfg
                        .header_env
                        .push((name.to_ascii_lowercase(), var.to_string())),
                    _ => {
                        return Err(bad_value(
                            f,
                            &v,
                            "NAME=VAR: a header name and an environment variable",
                        ))
                    }
                }
            }
            "--stall-once" => {
                let v = value_of(f, inline, &mut it)?;
                let bad = || {
                    format!("--stall-once {v:?}: write it like 20:2s (the 20th /call stalls 2s)")
                };
                let (n, d) = v.split_once(':').ok_or_else(bad)?;
                let n: u64 = n.parse().ok().filter(|n| *n >= 1).ok_or_else(bad)?;
                cfg.stall_once = Some((n, parse_duration(d).ok_or_else(bad)?));
            }
            "--helper-per-request" => cfg.helper = Some(value_of(f, inline, &mut it)?),
            _ if f.starts_with('-') => return Err(format!("unknown flag '{f}' (see --help)")),
            _ => return Err(format!("unexpected argument '{arg}' (see --help)")),
        }
    }
    Ok(cfg)
}

// ---------------------------------------------------------------------------------------
// HTTP.

struct Request {
    method: String,
    target: String,
    keep_alive: bool,
    authorization: Option<String>,
    /// Every header as received (lowercase names), for `--require-header-env`.
    headers: Vec<(String, String)>,
    /// The body still to read (only `/echo` leaves it unread: it sends it back as it reads).
    body: Unread,
}

#[derive(Clone, Copy, PartialEq)]
enum Unread {
    Nothing,
    Length(u64),
    Chunked,
}

enum ReadError {
    /// The peer went away, or an I/O error: just close.
    Closed,
    /// Malformed request: answer 400 and close.
    Bad(&'static str),
}

/// Reads one line (without the line ending) into `buf`. Ok(false) means EOF before any byte.
fn read_line(r: &mut BufReader<TcpStream>, buf: &mut Vec<u8>) -> Result<bool, ReadError> {
    buf.clear();
    let n = r
        .by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', buf)
        .map_err(|_| ReadError::Closed)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if n as u64 >= MAX_LINE {
            ReadError::Bad("line too long")
        } else {
            ReadError::Closed
        });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(true)
}

fn discard_body(r: &mut BufReader<TcpStream>, len: u64) -> Result<(), ReadError> {
    let copied =
        io::copy(&mut r.by_ref().take(len), &mut io::sink()).map_err(|_| ReadError::Closed)?;
    if copied < len {
        return Err(ReadError::Closed);
    }
    Ok(())
}

fn discard_chunked(r: &mut BufReader<TcpStream>, line: &mut Vec<u8>) -> Result<(), ReadError> {
    loop {
        if !read_line(r, line)? {
            return Err(ReadError::Closed);
        }
        let text = std::str::from_utf8(line).map_err(|_| ReadError::Bad("bad chunk size"))?;
        let size_text = text.split(';').next().unwrap_or("").trim();
        let size =
            u64::from_str_radix(size_text, 16).map_err(|_| ReadError::Bad("bad chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            for _ in 0..=MAX_HEADERS {
                if !read_line(r, line)? {
                    return Err(ReadError::Closed);
                }
                if line.is_empty() {
                    return Ok(());
                }
            }
            return Err(ReadError::Bad("too many trailers"));
        }
        discard_body(r, size)?;
        if !read_line(r, line)? {
            return Err(ReadError::Closed);
        }
        if !line.is_empty() {
            return Err(ReadError::Bad("chunk not followed by CRLF"));
        }
    }
}

fn read_request(r: &mut BufReader<TcpStream>, w: &mut TcpStream) -> Result<Request, ReadError> {
    let mut line = Vec::with_capacity(256);
    // Request line (tolerating a few empty lines before it, as RFC 9112 allows).
    let mut blank = 0;
    loop {
        if !read_line(r, &mut line)? {
            return Err(ReadError::Closed);
        }
        if !line.is_empty() {
            break;
        }
        blank += 1;
        if blank > 8 {
            return Err(ReadError::Bad("empty request"));
        }
    }
    let text = std::str::from_utf8(&line).map_err(|_| ReadError::Bad("request line not UTF-8"))?;
    let mut parts = text.split_ascii_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Bad("malformed request line"));
    };
    if !method
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
    {
        return Err(ReadError::Bad("malformed method"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(ReadError::Bad("unsupported HTTP version")),
    };
    let method = method.to_string();
    let target = target.to_string();

    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut authorization = None;
    let mut headers = Vec::new();
    let mut count = 0;
    loop {
        if !read_line(r, &mut line)? {
            return Err(ReadError::Closed);
        }
        if line.is_empty() {
            break;
        }
        count += 1;
        if count > MAX_HEADERS {
            return Err(ReadError::Bad("too many headers"));
        }
        let text = std::str::from_utf8(&line).map_err(|_| ReadError::Bad("header not UTF-8"))?;
        let Some((name, value)) = text.split_once(':') else {
            return Err(ReadError::Bad("header without colon"));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(ReadError::Bad("malformed header name"));
        }
        let value = value.trim();
        headers.push((name.to_ascii_lowercase(), value.to_string()));
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .parse()
                .map_err(|_| ReadError::Bad("bad Content-Length"))?;
            if content_length.is_some_and(|old| old != n) {
                return Err(ReadError::Bad("conflicting Content-Length"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return Err(ReadError::Bad("unsupported Transfer-Encoding"));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    keep_alive_token = true;
                }
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = value.eq_ignore_ascii_case("100-continue");
        } else if name.eq_ignore_ascii_case("authorization") {
            authorization = Some(value.to_string());
        }
    }

    let has_body = chunked || content_length.unwrap_or(0) > 0;
    if expect_continue && http11 && has_body {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|_| ReadError::Closed)?;
    }
    let body = if path_of(&target) == "/echo" {
        match (chunked, content_length) {
            (true, _) => Unread::Chunked,
            (false, Some(n)) if n > 0 => Unread::Length(n),
            _ => Unread::Nothing,
        }
    } else {
        if chunked {
            discard_chunked(r, &mut line)?;
        } else if let Some(len) = content_length {
            discard_body(r, len)?;
        }
        Unread::Nothing
    };

    Ok(Request {
        body,
        method,
        target,
        keep_alive: if http11 {
            !close
        } else {
            keep_alive_token && !close
        },
        authorization,
        headers,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// `/echo`: a chunked 200 carrying the request's body back, each piece written as it is read, so
/// memory stays at one piece whatever the size and both directions stream at once.
fn write_echo(
    r: &mut BufReader<TcpStream>,
    w: &mut TcpStream,
    body: Unread,
    keep_alive: bool,
) -> Result<(), ReadError> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: {connection}\r\n\r\n"
    );
    let closed = |_| ReadError::Closed;
    w.write_all(head.as_bytes()).map_err(closed)?;
    let mut piece = vec![0u8; 64 * 1024];
    let mut copy = |r: &mut BufReader<TcpStream>, w: &mut TcpStream, mut left: u64| {
        while left > 0 {
            let k = left.min(piece.len() as u64) as usize;
            let n = r.read(&mut piece[..k]).map_err(closed)?;
            if n == 0 {
                return Err(ReadError::Closed);
            }
            w.write_all(format!("{n:x}\r\n").as_bytes())
                .and_then(|_| w.write_all(&piece[..n]))
                .and_then(|_| w.write_all(b"\r\n"))
                .map_err(closed)?;
            left -= n as u64;
        }
        Ok(())
    };
    match body {
        Unread::Nothing => {}
        Unread::Length(n) => copy(r, w, n)?,
        Unread::Chunked => {
            let mut line = Vec::with_capacity(64);
            loop {
                if !read_line(r, &mut line)? {
                    return Err(ReadError::Closed);
                }
                let text =
                    std::str::from_utf8(&line).map_err(|_| ReadError::Bad("bad chunk size"))?;
                let size = u64::from_str_radix(text.split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| ReadError::Bad("bad chunk size"))?;
                if size == 0 {
                    // Trailers, up to the empty line (not sent back).
                    for _ in 0..=MAX_HEADERS {
                        if !read_line(r, &mut line)? {
                            return Err(ReadError::Closed);
                        }
                        if line.is_empty() {
                            break;
                        }
                    }
                    break;
                }
                copy(r, w, size)?;
                if !read_line(r, &mut line)? || !line.is_empty() {
                    return Err(ReadError::Bad("chunk not followed by CRLF"));
                }
            }
        }
    }
    w.write_all(b"0\r\n\r\n").map_err(closed)?;
    w.flush().map_err(closed)
}

/// A 200 whose body is `n` bytes of 'x', written in 64 KiB pieces.
fn write_big(w: &mut TcpStream, n: u64) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {n}\r\nConnection: keep-alive\r\n\r\n"
    );
    w.write_all(head.as_bytes())?;
    let piece = vec![b'x'; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(piece.len() as u64) as usize;
        w.write_all(&piece[..k])?;
        left -= k as u64;
    }
    w.flush()
}

fn write_response(
    w: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    keep_alive: bool,
    head: bool,
) -> io::Result<()> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut msg = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        reason(status),
        body.len(),
    )
    .into_bytes();
    if !head {
        msg.extend_from_slice(body.as_bytes());
    }
    w.write_all(&msg)?;
    w.flush()
}

/// The path part of a request target (drops the query, and the scheme and authority of an
/// absolute-form target).
fn path_of(target: &str) -> &str {
    let mut path = target;
    if let Some(rest) = path
        .strip_prefix("http://")
        .or_else(|| path.strip_prefix("https://"))
    {
        path = rest.find('/').map_or("/", |i| &rest[i..]);
    }
    path.split(['?', '#']).next().unwrap_or(path)
}

fn bearer_ok(header: Option<&str>, secret: &str) -> bool {
    let Some((scheme, token)) = header.and_then(|h| h.trim().split_once(' ')) else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && token.trim().as_bytes() == secret.as_bytes()
}

fn leak(state: &State) {
    let n = state.cfg.leak;
    if n == 0 {
        return;
    }
    let mut block = vec![0u8; n];
    // Write to every page so the memory is really resident, not just reserved.
    for i in (0..n).step_by(PAGE) {
        block[i] = 1;
    }
    block[n - 1] = 1;
    state
        .leaked
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(block);
    state.leaked_bytes.fetch_add(n as u64, Ordering::SeqCst);
}

/// Handles `/call`. In `hang` mode it never returns, which keeps the connection open.
fn call(state: &State, req: &Request) -> (u16, &'static str, String) {
    if let Some(secret) = &state.secret {
        if !bearer_ok(req.authorization.as_deref(), secret) {
            return (401, JSON, r#"{"error":"bad credentials"}"#.to_string());
        }
    }
    for (name, want) in &state.required {
        if !req.headers.iter().any(|(n, v)| n == name && v == want) {
            return (401, JSON, format!(r#"{{"error":"bad or missing {name}"}}"#));
        }
    }
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    if state.cfg.capacity.is_some_and(|cap| now > cap) {
        state.in_flight.fetch_sub(1, Ordering::SeqCst);
        let status = state.cfg.reject_status;
        return (status, JSON, state.cfg.reject_body.clone());
    }
    leak(state);
    if let Some((n, d)) = state.cfg.stall_once {
        let k = state.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let until = {
            let mut w = state.stall_until.lock().unwrap_or_else(|e| e.into_inner());
            if k == n {
                *w = Some(Instant::now() + d);
            }
            *w
        };
        if let Some(wait) = until.and_then(|u| u.checked_duration_since(Instant::now())) {
            thread::sleep(wait);
        }
    }
    match state.cfg.call {
        CallMode::Fast => {}
        CallMode::Hang => loop {
            // Never answer; the caller's connection stays open because this frame owns it.
            thread::sleep(Duration::from_secs(3600));
        },
        CallMode::Lock(d) => {
            state.queued.fetch_add(1, Ordering::SeqCst);
            let guard = state.call_lock.lock().unwrap_or_else(|e| e.into_inner());
            state.queued.fetch_sub(1, Ordering::SeqCst);
            thread::sleep(d);
            drop(guard);
        }
        CallMode::Sleep(d) => thread::sleep(d),
        CallMode::Redirect => {
            state.in_flight.fetch_sub(1, Ordering::SeqCst);
            return (302, TEXT, "see /login".to_string());
        }
        // Written by handle_connection itself: they need the socket.
        CallMode::Big(_) | CallMode::StallBody => {}
    }
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    state.answered.fetch_add(1, Ordering::SeqCst);
    (200, JSON, r#"{"ok":true}"#.to_string())
}

fn route(state: &State, req: &Request) -> (u16, &'static str, String) {
    match path_of(&req.target) {
        "/health" => {
            let answered = state.answered.load(Ordering::SeqCst);
            if state.cfg.health_fail_after.is_some_and(|n| answered >= n) {
                (500, TEXT, "unhealthy".to_string())
            } else {
                (200, TEXT, "ok".to_string())
            }
        }
        "/stats" => (
            200,
            JSON,
            format!(
                r#"{{"requests":{},"in_flight":{},"leaked_bytes":{},"queued":{}}}"#,
                state.requests.load(Ordering::SeqCst),
                state.in_flight.load(Ordering::SeqCst),
                state.leaked_bytes.load(Ordering::SeqCst),
                state.queued.load(Ordering::SeqCst),
            ),
        ),
        "/call" => call(state, req),
        _ => (404, JSON, r#"{"error":"not found"}"#.to_string()),
    }
}

/// Counts a connection as open from accept until its handler returns.
struct Open<'a>(&'a AtomicU64);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn handle_connection(stream: TcpStream, state: &State, open: u64) {
    let _open = Open(&state.open_conns);
    let over = state.cfg.max_conns.is_some_and(|m| open > m);
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(16 * 1024, read_half);
    let mut writer = stream;
    loop {
        match read_request(&mut reader, &mut writer) {
            Ok(req) => {
                state.requests.fetch_add(1, Ordering::SeqCst);
                if over {
                    let _ = write_response(
                        &mut writer,
                        503,
                        TEXT,
                        "too many connections",
                        false,
                        false,
                    );
                    if state.cfg.access_log {
                        out_line(&format!("{} {} 503", req.method, req.target));
                    }
                    let _ = writer.shutdown(Shutdown::Write);
                    return;
                }
                if path_of(&req.target) == "/echo" {
                    let sent = write_echo(&mut reader, &mut writer, req.body, req.keep_alive);
                    if state.cfg.access_log {
                        out_line(&format!("{} {} 200", req.method, req.target));
                    }
                    if sent.is_err() || !req.keep_alive {
                        let _ = writer.shutdown(Shutdown::Write);
                        return;
                    }
                    continue;
                }
                if let Some(cmd) = state
                    .cfg
                    .helper
                    .as_deref()
                    .filter(|_| path_of(&req.target) == "/call")
                {
                    let n = state.helper_runs.fetch_add(1, Ordering::SeqCst) + 1;
                    let ran = process::Command::new("sh")
                        .args(["-c", cmd])
                        .env("REQ", n.to_string())
                        .stdin(process::Stdio::null())
                        .stderr(process::Stdio::null())
                        .output();
                    let ok = ran.is_ok_and(|o| {
                        o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("fail")
                    });
                    if !ok {
                        let _ = write_response(
                            &mut writer,
                            500,
                            TEXT,
                            "helper failed",
                            req.keep_alive,
                            false,
                        );
                        if !req.keep_alive {
                            let _ = writer.shutdown(Shutdown::Write);
                            return;
                        }
                        continue;
                    }
                }
                if path_of(&req.target) == "/call" {
                    match state.cfg.call {
                        CallMode::Big(n) => {
                            if write_big(&mut writer, n).is_err() {
                                return;
                            }
                            continue;
                        }
                        CallMode::StallBody => {
                            let _ = writer.write_all(
                                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n0123456789",
                            );
                            let _ = writer.flush();
                            loop {
                                thread::sleep(Duration::from_secs(3600));
                            }
                        }
                        _ => {}
                    }
                }
                let (status, content_type, body) = route(state, &req);
                let head = req.method == "HEAD";
                let sent = write_response(
                    &mut writer,
                    status,
                    content_type,
                    &body,
                    req.keep_alive,
                    head,
                );
                if state.cfg.access_log {
                    out_line(&format!("{} {} {}", req.method, req.target, status));
                }
                if sent.is_err() || !req.keep_alive {
                    let _ = writer.shutdown(Shutdown::Write);
                    return;
                }
            }
            Err(ReadError::Closed) => return,
            Err(ReadError::Bad(why)) => {
                let body = format!(r#"{{"error":"bad request: {why}"}}"#);
                let _ = write_response(&mut writer, 400, JSON, &body, false, false);
                if state.cfg.access_log {
                    out_line("- - 400");
                }
                // Half-close and drain a little, so the 400 is not lost to a reset.
                let _ = writer.shutdown(Shutdown::Write);
                let _ = writer.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 4096];
                let mut drained = 0;
                while drained < 256 * 1024 {
                    match reader.get_mut().read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => drained += n,
                    }
                }
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------

fn sleep_forever() -> ! {
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

/// Never accepts: shrink the backlog to the minimum, fill the accept queue with
/// connections to ourselves, and hold them, so that further SYNs are dropped.
fn never_accept(listener: TcpListener) -> ! {
    // Calling listen(2) again on a listening socket updates its backlog (Linux).
    // SAFETY: the fd is a valid, open socket owned by `listener`, which lives forever here.
    unsafe {
        listen(listener.as_raw_fd(), 0);
    }
    let mut addr = listener
        .local_addr()
        .unwrap_or_else(|e| fail(1, &format!("local_addr: {e}")));
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    let mut held = Vec::new();
    for _ in 0..8 {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(50)) {
            held.push(s);
        }
    }
    out_line(&format!(
        "toy_server listening on http://{}",
        listener.local_addr().unwrap_or(addr)
    ));
    let _keep = (listener, held);
    sleep_forever()
}

fn main() {
    let cfg = parse_args(env::args().skip(1)).unwrap_or_else(|e| fail(2, &e));
    let secret = cfg.secret_env.as_ref().map(|name| match env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => fail(
            2,
            &format!("--require-secret-env: environment variable {name} is not set (or empty)"),
        ),
    });

    if let Some(secs) = cfg.alarm {
        // SAFETY: alarm(2) has no memory-safety preconditions.
        unsafe {
            alarm(secs);
        }
    }
    if let Some((after, as_given)) = cfg.watchdog.clone() {
        thread::spawn(move || {
            thread::sleep(after);
            err_line(&format!(
                "[oi] process watchdog: force-exiting after {as_given} (exit 124)"
            ));
            process::exit(124);
        });
    }
    if let Some(after) = cfg.die_after {
        let code = cfg.die_code;
        thread::spawn(move || {
            thread::sleep(after);
            process::exit(code);
        });
    }
    if let Some(delay) = cfg.ready_delay {
        thread::sleep(delay);
    }

    let addr = SocketAddr::new(cfg.bind, cfg.port);
    let listener =
        TcpListener::bind(addr).unwrap_or_else(|e| fail(1, &format!("cannot bind {addr}: {e}")));
    if cfg.never_accept {
        never_accept(listener);
    }
    let local = listener.local_addr().unwrap_or(addr);
    out_line(&format!("toy_server listening on http://{local}"));

    let required = cfg
        .header_env
        .iter()
        .map(|(name, var)| match env::var(var) {
            Ok(v) if !v.is_empty() => (name.clone(), v),
            _ => fail(
                2,
                &format!("--require-header-env: environment variable {var} is not set (or empty)"),
            ),
        })
        .collect();
    let state: &'static State = Box::leak(Box::new(State {
        cfg,
        secret,
        required,
        requests: AtomicU64::new(0),
        helper_runs: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        leaked_bytes: AtomicU64::new(0),
        queued: AtomicU64::new(0),
        open_conns: AtomicU64::new(0),
        call_lock: Mutex::new(()),
        calls: AtomicU64::new(0),
        stall_until: Mutex::new(None),
        leaked: Mutex::new(Vec::new()),
    }));

    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let open = state.open_conns.fetch_add(1, Ordering::SeqCst) + 1;
                // If the thread cannot be spawned the closure, and with it the stream, is
                // dropped, which closes the connection.
                let spawned = thread::Builder::new()
                    .name("conn".into())
                    .stack_size(256 * 1024)
                    .spawn(move || handle_connection(stream, state, open));
                if spawned.is_err() {
                    state.open_conns.fetch_sub(1, Ordering::SeqCst);
                }
            }
            // EMFILE and friends: back off briefly instead of spinning.
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}
