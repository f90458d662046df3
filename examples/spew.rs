//! `spew`: floods stdout as fast as it can, as a pipe-throughput benchmark for the code in
//! `witness` that captures a child's output. It uses only the Rust standard library, so it
//! also builds statically (`rustc -O --edition 2021 -C target-feature=+crt-static`).
//!
//! Output, through a locked stdout behind a 64 KiB buffer:
//! 1. one long line of `--long-line` bytes of `x`, followed by a newline (skipped when 0);
//! 2. `--lines` bytes of ordinary lines, each `--line-len` bytes long including its newline
//!    and starting with a line counter; when `--lines` is not a multiple of `--line-len`
//!    the last line is shorter, so the total is exactly `--lines` bytes.
//!
//! Flags (sizes: bytes, or with a `k`/`m`/`g` suffix meaning KiB/MiB/GiB):
//! - `--long-line BYTES`: length of the first line, without its newline (default 10m).
//! - `--lines BYTES`: total bytes of ordinary lines after it (default 200m).
//! - `--line-len N`: length of each ordinary line including its newline (default 100).
//! - `--no-final-newline`: the last line of the output is written without its newline.
//! - `--help`: print usage and exit 0.
//!
//! Exits 0 when everything was written, 1 on a write error (silently when the reader
//! closed the pipe), 2 on a bad flag.

use std::env;
use std::io::{self, BufWriter, ErrorKind, Write};
use std::process;

const USAGE: &str = "\
usage: spew [--long-line BYTES] [--lines BYTES] [--line-len N] [--no-final-newline]

  --long-line BYTES    first line: BYTES of 'x' then a newline (default 10m; 0 = none)
  --lines BYTES        then BYTES of ordinary numbered lines (default 200m)
  --line-len N         bytes per ordinary line, newline included (default 100)
  --no-final-newline   omit the newline at the very end of the output
  --help               this text

Sizes accept k/m/g suffixes (KiB/MiB/GiB).
";

const BUF: usize = 64 * 1024;
const COUNTER_DIGITS: usize = 12;

struct Config {
    long_line: u64,
    lines: u64,
    line_len: usize,
    final_newline: bool,
}

fn fail(msg: &str) -> ! {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "spew: {msg}");
    let _ = err.flush();
    process::exit(2)
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

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Config, String> {
    let mut cfg = Config {
        long_line: 10 << 20,
        lines: 200 << 20,
        line_len: 100,
        final_newline: true,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let f = flag.as_str();
        match f {
            "--help" | "-h" | "--no-final-newline" if inline.is_some() => {
                return Err(format!("{f}: takes no value"));
            }
            "--help" | "-h" => {
                let mut out = io::stdout().lock();
                let _ = out.write_all(USAGE.as_bytes());
                let _ = out.flush();
                process::exit(0);
            }
            "--no-final-newline" => cfg.final_newline = false,
            "--long-line" | "--lines" | "--line-len" => {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .ok_or_else(|| format!("{f}: missing value (see --help)"))?,
                };
                let n = parse_size(&v).ok_or_else(|| {
                    format!("{f}: invalid value '{v}' (expected a size like 100, 64k or 10m)")
                })?;
                match f {
                    "--long-line" => cfg.long_line = n,
                    "--lines" => cfg.lines = n,
                    _ => {
                        cfg.line_len =
                            usize::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| {
                                format!("{f}: invalid value '{v}' (expected at least 1)")
                            })?;
                    }
                }
            }
            _ if f.starts_with('-') => return Err(format!("unknown flag '{f}' (see --help)")),
            _ => return Err(format!("unexpected argument '{arg}' (see --help)")),
        }
    }
    Ok(cfg)
}

/// Writes the counter, right-aligned and zero-padded, into the start of `line`
/// (as much of it as fits before the newline).
fn stamp(line: &mut [u8], mut counter: u64) {
    let room = line.len().saturating_sub(1).min(COUNTER_DIGITS);
    for slot in line[..room].iter_mut().rev() {
        *slot = b'0' + (counter % 10) as u8;
        counter /= 10;
    }
}

fn spew(cfg: &Config, out: &mut impl Write) -> io::Result<()> {
    let has_lines = cfg.lines > 0;

    if cfg.long_line > 0 {
        let chunk = [b'x'; BUF];
        let mut left = cfg.long_line;
        while left > 0 {
            let n = left.min(BUF as u64) as usize;
            out.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        // With --no-final-newline and no ordinary lines, this is the last line.
        if has_lines || cfg.final_newline {
            out.write_all(b"\n")?;
        }
    }

    // Template line: counter, a space, a cycling alphabet, newline.
    let len = cfg.line_len;
    let mut line: Vec<u8> = (0..len)
        .map(|i| match i {
            _ if i + 1 == len => b'\n',
            _ if i == COUNTER_DIGITS => b' ',
            _ => b'a' + (i % 26) as u8,
        })
        .collect();
    let full = cfg.lines / len as u64;
    let rest = (cfg.lines % len as u64) as usize;
    for counter in 0..full {
        stamp(&mut line, counter);
        let last = rest == 0 && counter + 1 == full;
        if last && !cfg.final_newline {
            out.write_all(&line[..len - 1])?;
        } else {
            out.write_all(&line)?;
        }
    }
    if rest > 0 {
        // A shorter last line: its first rest-1 bytes, then the newline.
        let mut tail = line[..rest].to_vec();
        stamp(&mut tail, full);
        tail[rest - 1] = b'\n';
        if !cfg.final_newline {
            tail.pop();
        }
        out.write_all(&tail)?;
    }
    out.flush()
}

fn main() {
    let cfg = parse_args(env::args().skip(1)).unwrap_or_else(|e| fail(&e));
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(BUF, stdout.lock());
    if let Err(e) = spew(&cfg, &mut out) {
        if e.kind() != ErrorKind::BrokenPipe {
            let _ = writeln!(io::stderr(), "spew: write error: {e}");
        }
        process::exit(1);
    }
}
