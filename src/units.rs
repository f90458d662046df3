//! Durations, sizes and counts as people write them: one bounded parser each, used by clap's value
//! parsers (cli.rs) and by the soak plan alike, so a flag and a plan key accept and refuse the same
//! things with the same words.

use std::time::Duration;

/// The longest duration witness accepts anywhere (30 days): longer is a typo, and unbounded values
/// overflow clocks or sleep forever.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

const DURATION_HINT: &str = "write it like 100ms, 2s, 1.5s, 1m30s or 2h (units: ms, s, m, h)";

/// Durations the way people write them: `100ms`, `2s`, `1.5s`, `1m30s`, `2h`; a bare number is
/// seconds. Units are ms, s, m and h only; at most 30 days; never negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; a duration is zero or more"));
    }
    if t.is_empty() {
        return Err(format!("an empty value is not a duration; {DURATION_HINT}"));
    }
    let mut rest = t;
    let mut total = 0.0f64;
    let mut parts = 0;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a duration; {DURATION_HINT}"))?;
        let ulen = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(ulen);
        let mult = match unit.trim() {
            "" if parts == 0 && next.is_empty() => 1.0,
            "s" | "sec" | "secs" => 1.0,
            "ms" => 0.001,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("{s:?} is not a duration; {DURATION_HINT}")),
            u => {
                return Err(format!(
                "{s:?}: unknown unit {u:?}; witness takes ms, s, m and h (e.g. 100ms, 2s, 1m30s)"
            ))
            }
        };
        total += n * mult;
        parts += 1;
        rest = next;
    }
    if !total.is_finite() || total > MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "{s:?} is too long: witness takes durations up to 720h (30 days)"
        ));
    }
    Ok(Duration::from_secs_f64(total))
}

/// A duration that must be more than zero (intervals, timeouts, run lengths).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} must be more than zero, e.g. 500ms or 1s"));
    }
    Ok(d)
}

/// A sampling interval: a duration that is more than zero.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    parse_duration(s).and_then(|d| {
        if d.is_zero() {
            Err(format!(
                "{s:?} is no interval: it must be more than zero, e.g. 500ms or 1s"
            ))
        } else {
            Ok(d)
        }
    })
}

/// The most concurrent workers witness runs (a `--levels` step, a plan's workers in all): more is a
/// typo, and would spend witness's own file descriptors and memory, not the server's.
pub const MAX_CONCURRENCY: u32 = 10_000;

/// The most requests one worker sends per level (`--rounds`).
pub const MAX_ROUNDS: u32 = 10_000_000;

/// A whole number from `min` to `max`, refused with the range in words (never a panic, never
/// "0 is allowed" when it is not).
pub fn parse_bounded(s: &str, min: u32, max: u32, what: &str) -> Result<u32, String> {
    let t = s.trim();
    let range = format!("{what} is a whole number from {min} to {max}");
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; {range}"));
    }
    match t.parse::<u64>() {
        Ok(n) if n >= min as u64 && n <= max as u64 => Ok(n as u32),
        Ok(_) => Err(format!("{s:?} is out of range; {range}")),
        Err(_) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("{s:?} is out of range; {range}"))
        }
        Err(_) => Err(format!("{s:?} is not a whole number; {range}")),
    }
}

/// One concurrency level: 1 to [`MAX_CONCURRENCY`] workers.
pub fn parse_level(s: &str) -> Result<u32, String> {
    parse_bounded(s, 1, MAX_CONCURRENCY, "a concurrency level")
}

/// The highest arrival rate witness schedules (`--rates`): more is a typo.
pub const MAX_RATE: f64 = 1_000_000.0;

/// An arrival rate: `200/s`, `30/m` (per minute), `0.5/s`; a bare number is per second. From
/// 0.01/s to [`MAX_RATE`]; returned in requests per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let hint = "write a rate like 200/s, 0.5/s or 30/m (requests per second or per minute)";
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; {hint}"));
    }
    let (n, per) = match t.split_once('/') {
        None => (t, 1.0),
        Some((n, "s" | "sec" | "second")) => (n, 1.0),
        Some((n, "m" | "min" | "minute")) => (n, 60.0),
        Some((_, u)) => return Err(format!("{s:?}: unknown unit /{u}; {hint}")),
    };
    let v: f64 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a rate; {hint}"))?;
    let r = v / per;
    if !r.is_finite() {
        return Err(format!("{s:?} is not a rate; {hint}"));
    }
    if r < 0.01 {
        return Err(format!(
            "{s:?} is too low: a rate is at least 0.01/s (a level must send something); {hint}"
        ));
    }
    if r > MAX_RATE {
        return Err(format!("{s:?} is too high: at most {MAX_RATE}/s"));
    }
    Ok(r)
}

/// The fastest a recording is replayed (`replay --speeds`): more is a typo.
pub const MAX_SPEED: f64 = 10_000.0;

/// A replay speed: `2x` (twice as fast as recorded), `0.5x`, `1×`; a bare number too. Above 0, at
/// most [`MAX_SPEED`].
pub fn parse_speed(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let hint = "write a speed like 1x (as recorded), 2x (twice as fast) or 0.5x (half as fast)";
    let n = t.strip_suffix(['x', 'X', '×']).unwrap_or(t).trim();
    let v: f64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a speed; {hint}"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!(
            "{s:?}: a speed must be above 0 (0x would never send); {hint}"
        ));
    }
    if v > MAX_SPEED {
        return Err(format!("{s:?} is too fast: at most {MAX_SPEED}x"));
    }
    Ok(v)
}

/// A fraction as a percentage: `10%` (or `10`) is 0.1; from 1 % to 100 %.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v: f64 = t
        .strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage; write it like 10%"))?;
    if !(1.0..=100.0).contains(&v) {
        return Err(format!(
            "{s:?} is out of range; a percentage from 1% to 100%"
        ));
    }
    Ok(v / 100.0)
}

/// Requests per worker per level: 1 to [`MAX_ROUNDS`].
pub fn parse_rounds(s: &str) -> Result<u32, String> {
    parse_bounded(s, 1, MAX_ROUNDS, "a round count")
}

/// Memory limits the way docker takes them: bytes, or with b/k/m/g (KiB, MiB, GiB); `512m`, `1g`.
/// The engine refuses limits under 6 MiB, so they are refused here, naming the value.
pub fn parse_memory_limit(s: &str) -> Result<i64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b').filter(|r| r.ends_with(['k', 'm', 'g'])))
        .unwrap_or(&t);
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size; write it like 64m, 512m or 1g"))?;
    let mult = match unit {
        "" | "b" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("{s:?}: unknown unit {u:?}; use b, k, m or g")),
    };
    let bytes = (n * mult).round();
    if !(bytes >= 6.0 * 1024.0 * 1024.0 && bytes < i64::MAX as f64) {
        return Err(format!(
            "{s:?} is not a usable memory limit (the engine needs at least 6m)"
        ));
    }
    Ok(bytes as i64)
}

/// Sizes in plans and flags: bytes, or "512MiB", "2GiB", "300MB" (k/m/g alone are binary).
/// At most 1 TiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size; write it like \"512MiB\" or \"2GiB\""))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "kb" => 1e3,
        "m" | "mib" => 1024.0 * 1024.0,
        "mb" => 1e6,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "gb" => 1e9,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?}; use KiB, MiB, GiB, kB, MB or GB"
            ))
        }
    };
    let b = n * mult;
    if !b.is_finite() || b < 1.0 || b > (1u64 << 40) as f64 {
        return Err(format!("{s:?} is not a usable size (from 1 byte to 1TiB)"));
    }
    Ok(b as u64)
}

/// A CPU count for a container: more than zero.
pub fn parse_cpus(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(n) if n > 0.0 && n.is_finite() && n <= 4096.0 => Ok(n),
        _ => Err(format!(
            "{s:?} is not a CPU count; write it like 1, 0.5 or 2.5"
        )),
    }
}

/// Parses `FILE=±D` (`--clock-offset`): the file as given, and seconds.
pub fn parse_clock_offset(s: &str) -> Result<(std::path::PathBuf, f64), String> {
    let (file, d) = s.rsplit_once('=').ok_or_else(|| {
        format!("'{s}' is not FILE=±DURATION (for example results.json=+1.5s or wrap.jsonl=-250ms)")
    })?;
    let d = d.trim();
    let (sign, rest) = match d.as_bytes().first() {
        Some(b'+') => (1.0, &d[1..]),
        Some(b'-') => (-1.0, &d[1..]),
        _ => {
            return Err(format!(
                "'{d}' in '{s}' needs a sign: +D if that file's clock is behind, -D if ahead (e.g. +1.5s)"
            ))
        }
    };
    let dur = parse_duration(rest).map_err(|e| format!("'{d}' in --clock-offset {s}: {e}"))?;
    if file.is_empty() {
        return Err(format!("'{s}' names no file before '='"));
    }
    Ok((std::path::PathBuf::from(file), sign * dur.as_secs_f64()))
}

/// `wrap --proxy LISTEN=UPSTREAM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxySpec {
    pub listen: std::net::SocketAddr,
    pub upstream: std::net::SocketAddr,
    /// `UPSTREAM` was written `https://…`: the proxy speaks TLS to the server.
    pub upstream_tls: bool,
}

/// Reads `LISTEN=UPSTREAM`, two socket addresses (`127.0.0.1:8080=127.0.0.1:8081`); a bare port
/// means 127.0.0.1.
pub fn parse_proxy(s: &str) -> Result<ProxySpec, String> {
    let Some((l, u)) = s.split_once('=') else {
        return Err(format!(
            "{s:?}: write it LISTEN=UPSTREAM, e.g. 127.0.0.1:8080=127.0.0.1:8081 (witness listens on the first and forwards to the second, where the server listens)"
        ));
    };
    let addr = |a: &str, what: &str| -> Result<std::net::SocketAddr, String> {
        if let Ok(port) = a.parse::<u16>() {
            return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        }
        a.parse().map_err(|_| {
            format!(
                "{what} {a:?} is not an address and port: write it as 127.0.0.1:8080 or [::1]:8080"
            )
        })
    };
    let (u, upstream_tls) = match u.strip_prefix("https://") {
        Some(rest) => (rest.trim_end_matches('/'), true),
        None => (
            u.strip_prefix("http://").unwrap_or(u).trim_end_matches('/'),
            false,
        ),
    };
    let spec = ProxySpec {
        listen: addr(l, "LISTEN")?,
        upstream: addr(u, "UPSTREAM")?,
        upstream_tls,
    };
    if spec.listen == spec.upstream {
        return Err(format!(
            "{s:?}: LISTEN and UPSTREAM are the same address; tell the server to listen on another port and give that as UPSTREAM"
        ));
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_the_usual_human_forms() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h2m").unwrap(), Duration::from_secs(3720));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert!(parse_interval("0s").unwrap_err().contains("more than zero"));
        assert!(parse_positive_duration("0ms")
            .unwrap_err()
            .contains("more than zero"));
        assert_eq!(parse_interval("500ms").unwrap(), Duration::from_millis(500));
        let e = parse_duration("soon").unwrap_err();
        assert!(e.contains("like 100ms"), "{e}");
    }

    #[test]
    fn durations_are_bounded_and_only_documented_units_pass() {
        for bad in ["1y", "1w", "3d", "1ns", "5us"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("unknown unit"), "{bad}: {e}");
        }
        for huge in ["99999999999999999999999", "10000000000000000000s", "721h"] {
            let e = parse_duration(huge).unwrap_err();
            assert!(e.contains("too long"), "{huge}: {e}");
        }
        assert_eq!(parse_duration("720h").unwrap(), MAX_DURATION);
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1s2").is_err());
    }

    #[test]
    fn rates_are_per_second_and_bounded_with_the_fix_in_words() {
        assert_eq!(parse_rate("200/s").unwrap(), 200.0);
        assert_eq!(parse_rate("30/m").unwrap(), 0.5);
        assert_eq!(parse_rate("7").unwrap(), 7.0);
        for bad in ["0/s", "-1/s", "x/s", "5/h", "0.001/s", "2000000/s", "inf/s"] {
            assert!(parse_rate(bad).unwrap_err().contains(bad), "{bad}");
        }
        assert_eq!(parse_percent("10%").unwrap(), 0.1);
        assert!(parse_percent("0%").is_err() && parse_percent("ten").is_err());
    }

    #[test]
    fn counts_are_bounded_with_the_range_in_words() {
        assert_eq!(parse_level("8").unwrap(), 8);
        assert_eq!(parse_level("10000").unwrap(), 10_000);
        for (bad, word) in [
            ("0", "out of range"),
            ("10001", "out of range"),
            ("99999999999", "out of range"),
            ("999999999999999999999999", "out of range"),
            ("-1", "negative"),
            ("four", "not a whole number"),
            ("", "not a whole number"),
        ] {
            let e = parse_level(bad).unwrap_err();
            assert!(e.contains(word), "{bad}: {e}");
            assert!(e.contains("from 1 to 10000"), "{bad}: {e}");
        }
        assert!(parse_rounds("0")
            .unwrap_err()
            .contains("from 1 to 10000000"));
    }

    #[test]
    fn sizes_read_the_way_docker_takes_them() {
        assert_eq!(parse_memory_limit("32m").unwrap(), 32 << 20);
        assert_eq!(parse_memory_limit("1g").unwrap(), 1 << 30);
        assert_eq!(parse_memory_limit("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_memory_limit("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_memory_limit("8mb").unwrap(), 8 << 20);
        assert!(parse_memory_limit("1k")
            .unwrap_err()
            .contains("at least 6m"));
        assert!(parse_memory_limit("lots").unwrap_err().contains("like 64m"));
        assert!(parse_memory_limit("5x")
            .unwrap_err()
            .contains("unknown unit"));
    }

    #[test]
    fn plan_sizes_are_binary_or_decimal_and_bounded() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("2000000GiB").unwrap_err().contains("1TiB"));
    }
}

/// A duration as every view shows it, in the unit that fits it: "85µs", "1.24ms", "12.5ms",
/// "240ms", "2.414s", "85.03s" (three figures below a second, milliseconds above). One word (no space), so a table's columns and a
/// reader's eye keep it whole.
pub fn took(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    let a = s.abs();
    if a < 0.000_999_5 {
        format!("{:.0}µs", s * 1e6)
    } else if a < 0.009_995 {
        format!("{:.2}ms", s * 1e3)
    } else if a < 0.099_95 {
        format!("{:.1}ms", s * 1e3)
    } else if a < 0.999_5 {
        format!("{:.0}ms", s * 1e3)
    } else if a < 9.999_5 {
        // Seconds keep their milliseconds: 1.003 s and 1.005 s are not one figure.
        format!("{s:.3}s")
    } else if a < 99.995 {
        format!("{s:.2}s")
    } else {
        format!("{s:.1}s")
    }
}

/// A span of durations ("1.02–1.05s", "85µs–1.20ms"): one unit when both share it.
pub fn took_span(lo: f64, hi: f64) -> String {
    let (a, b) = (took(lo), took(hi));
    if a == b {
        return a;
    }
    let unit = |t: &str| {
        t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-')
            .to_string()
    };
    if unit(&a) == unit(&b) {
        format!("{}–{b}", a.trim_end_matches(unit(&a).as_str()))
    } else {
        format!("{a}–{b}")
    }
}

#[cfg(test)]
mod took_tests {
    use super::{took, took_span};

    #[test]
    fn a_duration_is_shown_in_the_unit_that_fits_it_to_three_figures() {
        let cases = [
            (0.000_085, "85µs"),
            (0.000_999_4, "999µs"),
            (0.000_999_6, "1.00ms"),
            (0.001_24, "1.24ms"),
            (0.012_5, "12.5ms"),
            (0.24, "240ms"),
            (0.999_6, "1.000s"),
            (2.414, "2.414s"),
            (85.0, "85.00s"),
            (240.0, "240.0s"),
            (0.0, "0µs"),
        ];
        for (s, want) in cases {
            assert_eq!(took(s), want, "{s}");
        }
        assert_eq!(took_span(1.02, 1.05), "1.020–1.050s");
        assert_eq!(took_span(0.000_085, 0.0012), "85µs–1.20ms");
        assert_eq!(took_span(2.0, 2.0), "2.000s");
    }
}
