//! How a [`Record`] is written as one journal line, and read back.
//!
//! Requests are most of a journal, so they get a compact form with short keys, written by hand:
//!
//! ```text
//! {"k":"rq","i":123,"g":"level4","w":3,"s":1.234567,"d":123456,"c":200}
//! ```
//!
//! | key  | field                    | form                                                        |
//! |------|--------------------------|-------------------------------------------------------------|
//! | `k`  | always `"rq"`            | first key: what tells the compact form apart                |
//! | `i`  | `id`                     | integer                                                     |
//! | `g`  | `group`                  | string                                                      |
//! | `w`  | `worker`                 | integer                                                     |
//! | `s`  | `start_s`                | seconds                                                     |
//! | `d`  | `duration_s`             | integer **nanoseconds** (`ds`: seconds, where ns would not give the same number back) |
//! | `e`  | `t_s`                    | absent: `t_s` is the end, `s` + `d` rounded to the µs; else µs to add to that |
//! | `t`  | `t_s`                    | seconds, only where the end cannot be derived that way      |
//! | `o`  | `outcome`                | absent: ok; else `timeout`, `error` or `rejected`           |
//! | `p`, `l` | timeout's `phase`, `limit_s` |                                                     |
//! | `x`  | error's `error` kind     | its snake_case name, as in the long form                    |
//! | `r`  | rejected's `reason`      |                                                             |
//! | `oc` | the outcome's own status | absent: the same as `c`; a number or null where it differs  |
//! | `c`  | `status`                 |                                                             |
//! | `h`  | `scheduled_s`            | seconds                                                     |
//! | `m`  | `detail`                 |                                                             |
//! | `bb` | `body_bytes`             |                                                             |
//! | `bc` | `body_cut`               | `true`, or absent                                           |
//! | `og` | `origin` (merged journals) |                                                           |
//! | `pc` | `connect_s`              | integer **µs**; absent when the request reused a connection (`pcs`: seconds, where µs would not give the same number back) |
//! | `ph` | `headers_s`              | integer µs from the start to the response's headers (`phs`: seconds, likewise) |
//! | `pt` | `handshake_s`            | integer µs of the new connection's TLS handshake; absent over plain HTTP and on a reused connection (`pts`: seconds, likewise) |
//! | `wl` | `lag_s`                  | integer µs of witness's own wait before the request's first system call; absent in older journals and where not measured (`wls`: seconds, likewise) |
//!
//! Seconds on the run's clock are whole microseconds (what [`super::micros`] keeps), so they are
//! written with at most six decimals; any other value is written in its shortest exact form.
//! Durations keep the nanoseconds the clock measured: they cost three digits a record and keep
//! every record exactly as it was made, while the analysis may still choose to count in µs.
//! Every field reads back bit for bit.
//!
//! Every other event keeps the long serde form (`{"t_s":…,"kind":…}`); so do journals written
//! before the compact form, which [`decode`] reads as they are.

use std::time::Duration;

use serde::de::{Error as _, IntoDeserializer};
use serde::Deserialize;

use super::{ErrorKind, Event, Outcome, Record, TimeoutPhase};

/// What a line that cannot be read says: serde_json's own error, for both forms.
pub type DecodeError = serde_json::Error;

/// Appends `rec` as one journal line, without the newline.
pub fn encode(rec: &Record, out: &mut Vec<u8>) -> serde_json::Result<()> {
    if let Event::Request { .. } = &rec.event {
        if encode_request(rec, out) {
            return Ok(());
        }
    }
    serde_json::to_writer(out, rec)
}

/// Reads one journal line (without its newline): the compact request form or the long form.
pub fn decode(line: &[u8]) -> Result<Record, DecodeError> {
    if let Some(r) = plain_request(line) {
        return Ok(r);
    }
    let mut p = Parser { b: line, at: 0 };
    if p.compact() {
        return decode_request(p).map_err(DecodeError::custom);
    }
    serde_json::from_slice(line)
}

// ---- writing -------------------------------------------------------------------------------------

/// The compact form of a request record; false (and nothing written) for a value JSON cannot hold.
fn encode_request(rec: &Record, out: &mut Vec<u8>) -> bool {
    let Event::Request {
        id,
        group,
        worker,
        start_s,
        duration_s,
        outcome,
        status,
        scheduled_s,
        detail,
        body_bytes,
        body_cut,
        connect_s,
        headers_s,
        handshake_s,
        lag_s,
        // A relayed call's JSON-RPC id has no compact form: that record is written in full.
        rpc_id: None,
    } = &rec.event
    else {
        return false;
    };
    let limit = match outcome {
        Outcome::Timeout { limit_s, .. } => *limit_s,
        _ => 0.0,
    };
    if ![
        rec.t_s,
        *start_s,
        *duration_s,
        scheduled_s.unwrap_or(0.0),
        limit,
        connect_s.unwrap_or(0.0),
        headers_s.unwrap_or(0.0),
        handshake_s.unwrap_or(0.0),
        lag_s.unwrap_or(0.0),
    ]
    .iter()
    .all(|v| v.is_finite())
    {
        return false;
    }
    out.extend_from_slice(b"{\"k\":\"rq\",\"i\":");
    write_u64(out, *id);
    out.extend_from_slice(b",\"g\":");
    write_str(out, group);
    out.extend_from_slice(b",\"w\":");
    write_u64(out, *worker as u64);
    out.extend_from_slice(b",\"s\":");
    write_secs(out, *start_s);
    let d_ns = exact_nanos(*duration_s);
    match d_ns {
        Some(n) => {
            out.extend_from_slice(b",\"d\":");
            write_u64(out, n);
        }
        None => {
            out.extend_from_slice(b",\"ds\":");
            write_float(out, *duration_s);
        }
    }
    match (exact_micros(*start_s), d_ns, exact_micros(rec.t_s)) {
        (Some(s), Some(d), Some(t)) => {
            let e = t - derived_end_us(s, d);
            if e != 0 {
                out.extend_from_slice(b",\"e\":");
                write_i64(out, e);
            }
        }
        _ => {
            out.extend_from_slice(b",\"t\":");
            write_secs(out, rec.t_s);
        }
    }
    let own_status = match outcome {
        Outcome::Ok => None,
        Outcome::Timeout { phase, limit_s } => {
            out.extend_from_slice(b",\"o\":\"timeout\",\"p\":");
            let _ = serde_json::to_writer(&mut *out, phase);
            out.extend_from_slice(b",\"l\":");
            write_float(out, *limit_s);
            None
        }
        Outcome::Error { error, status: os } => {
            out.extend_from_slice(b",\"o\":\"error\",\"x\":");
            let _ = serde_json::to_writer(&mut *out, error);
            Some(os)
        }
        Outcome::Rejected { status: os, reason } => {
            out.extend_from_slice(b",\"o\":\"rejected\",\"r\":");
            write_str(out, reason);
            Some(os)
        }
    };
    if let Some(os) = own_status.filter(|os| *os != status) {
        out.extend_from_slice(b",\"oc\":");
        match os {
            Some(c) => write_u64(out, *c as u64),
            None => out.extend_from_slice(b"null"),
        }
    }
    if let Some(c) = status {
        out.extend_from_slice(b",\"c\":");
        write_u64(out, *c as u64);
    }
    if let Some(h) = scheduled_s {
        out.extend_from_slice(b",\"h\":");
        write_secs(out, *h);
    }
    if let Some(m) = detail {
        out.extend_from_slice(b",\"m\":");
        write_str(out, m);
    }
    if let Some(b) = body_bytes {
        out.extend_from_slice(b",\"bb\":");
        write_u64(out, *b);
    }
    if *body_cut {
        out.extend_from_slice(b",\"bc\":true");
    }
    // Phases in whole µs (what the client records): "ph":843 rather than "ph":0.000843.
    for (key, v) in [
        ("pc", connect_s),
        ("ph", headers_s),
        ("pt", handshake_s),
        ("wl", lag_s),
    ] {
        let Some(v) = v else { continue };
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        match exact_micros(*v) {
            Some(us) => {
                out.extend_from_slice(b"\":");
                write_i64(out, us);
            }
            None => {
                out.extend_from_slice(b"s\":");
                write_float(out, *v);
            }
        }
    }
    if let Some(o) = rec.origin {
        out.extend_from_slice(b",\"og\":");
        write_u64(out, o as u64);
    }
    out.push(b'}');
    true
}

/// The end a request's `t_s` is taken to be when the line has no `t`: start plus duration, to
/// the nearest microsecond.
fn derived_end_us(start_us: i64, duration_ns: u64) -> i64 {
    start_us.saturating_add(duration_ns.saturating_add(500).div_euclid(1000) as i64)
}

/// `x` as whole microseconds, when `x` is exactly what [`super::micros`] makes of them (and so
/// what "x to six decimals" reads back as).
fn exact_micros(x: f64) -> Option<i64> {
    if x.is_nan() || x.abs() >= 9e9 {
        return None;
    }
    // Through the integer, so -0.0 is not taken for 0.
    let n = (x * 1e6).round() as i64;
    ((n as f64 / 1e6).to_bits() == x.to_bits()).then_some(n)
}

/// `d` as whole nanoseconds, when `Duration::as_secs_f64` of them gives `d` back bit for bit (which
/// it does for every duration the clock measured).
fn exact_nanos(d: f64) -> Option<u64> {
    if !(0.0..1e9).contains(&d) {
        return None;
    }
    let n = (d * 1e9).round() as u64;
    (nanos_to_secs(n).to_bits() == d.to_bits()).then_some(n)
}

fn nanos_to_secs(n: u64) -> f64 {
    Duration::from_nanos(n).as_secs_f64()
}

/// Seconds: whole microseconds to at most six decimals, anything else in its shortest exact form.
fn write_secs(out: &mut Vec<u8>, x: f64) {
    let Some(us) = exact_micros(x) else {
        return write_float(out, x);
    };
    if us < 0 {
        out.push(b'-');
    }
    let us = us.unsigned_abs();
    write_u64(out, us / 1_000_000);
    let mut frac = us % 1_000_000;
    if frac == 0 {
        return;
    }
    let mut digits = 6;
    while frac % 10 == 0 {
        frac /= 10;
        digits -= 1;
    }
    out.push(b'.');
    let mut buf = [b'0'; 6];
    for i in (0..digits).rev() {
        buf[i] = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    out.extend_from_slice(&buf[..digits]);
}

/// A finite float in the shortest form that reads back as the same number (never an exponent, so
/// always a JSON number).
fn write_float(out: &mut Vec<u8>, x: f64) {
    use std::io::Write;
    let _ = write!(out, "{x}");
}

fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // A byte loop, not a call to memmove, for a handful of digits.
    out.extend(buf[i..].iter().copied());
}

fn write_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(out, n.unsigned_abs());
}

/// A JSON string, escaped as serde_json escapes it (so the journal's secret scrubbing, which looks
/// for that form, finds it here too).
fn write_str(out: &mut Vec<u8>, s: &str) {
    let plain = s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if plain {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(out, s);
    }
}

// ---- reading -------------------------------------------------------------------------------------

/// One value of a flat JSON object.
#[derive(Clone, Copy)]
enum Val<'a> {
    /// A string's bytes between its quotes, and whether they hold an escape.
    Str(&'a [u8], bool),
    /// A number's bytes (ASCII digits, signs, points and exponents only).
    Num(&'a [u8]),
    Bool(bool),
    Null,
}

struct Parser<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self.at < self.b.len() && matches!(self.b[self.at], b' ' | b'\t' | b'\r' | b'\n') {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.b.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// Whether the line is an object whose first key is `"k"`: the compact form. Leaves the parser
    /// just after that key's colon.
    fn compact(&mut self) -> bool {
        self.eat(b'{') && matches!(self.string(), Ok((b"k", false))) && self.eat(b':')
    }

    /// A string's raw bytes between its quotes.
    fn string(&mut self) -> Result<(&'a [u8], bool), String> {
        if !self.eat(b'"') {
            return Err(format!("expected a string at column {}", self.at + 1));
        }
        let start = self.at;
        let mut escaped = false;
        while let Some(&c) = self.b.get(self.at) {
            match c {
                b'"' => {
                    self.at += 1;
                    return Ok((&self.b[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 2;
                }
                _ => self.at += 1,
            }
        }
        Err("a string is not closed".into())
    }

    fn value(&mut self) -> Result<Val<'a>, String> {
        self.ws();
        let rest = &self.b[self.at.min(self.b.len())..];
        let lit = |p: &mut Self, word: &[u8], v: Val<'a>| {
            if rest.starts_with(word) {
                p.at += word.len();
                Ok(v)
            } else {
                Err(format!("unexpected value at column {}", p.at + 1))
            }
        };
        match rest.first() {
            Some(b'"') => self.string().map(|(s, e)| Val::Str(s, e)),
            Some(b't') => lit(self, b"true", Val::Bool(true)),
            Some(b'f') => lit(self, b"false", Val::Bool(false)),
            Some(b'n') => lit(self, b"null", Val::Null),
            Some(c) if c.is_ascii_digit() || *c == b'-' => {
                let n = rest
                    .iter()
                    .take_while(|c| {
                        c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E')
                    })
                    .count();
                self.at += n;
                Ok(Val::Num(&rest[..n]))
            }
            _ => Err(format!("expected a value at column {}", self.at + 1)),
        }
    }
}

fn text(v: Val) -> Result<String, String> {
    match v {
        Val::Str(s, false) => std::str::from_utf8(s)
            .map(str::to_owned)
            .map_err(|e| e.to_string()),
        Val::Str(s, true) => {
            let mut quoted = Vec::with_capacity(s.len() + 2);
            quoted.push(b'"');
            quoted.extend_from_slice(s);
            quoted.push(b'"');
            serde_json::from_slice(&quoted).map_err(|e| e.to_string())
        }
        _ => Err("expected a string".into()),
    }
}

fn int<T: TryFrom<i128>>(v: Val) -> Result<T, String> {
    let Val::Num(s) = v else {
        return Err("expected an integer".into());
    };
    let n: i128 = match short_int(s) {
        Some(n) => n.into(),
        None => number(s)
            .parse()
            .map_err(|_| format!("{} is not an integer", number(s)))?,
    };
    T::try_from(n).map_err(|_| format!("{} is out of range", number(s)))
}

/// A number's bytes as text: only ASCII was taken.
fn number(s: &[u8]) -> &str {
    std::str::from_utf8(s).unwrap_or("")
}

/// An integer of at most 18 digits (every one a journal writes), read without `i128`'s parser:
/// what `str::parse` makes of it, at a fraction of the cost (a journal holds millions).
fn short_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        b => (false, b),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n = 0i64;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (c - b'0') as i64;
    }
    Some(if neg { -n } else { n })
}

fn float(v: Val) -> Result<f64, String> {
    match v {
        Val::Num(s) => match micros_decimal(s) {
            Some(x) => Ok(x),
            None => {
                let s = number(s);
                s.parse().map_err(|_| format!("{s} is not a number"))
            }
        },
        _ => Err("expected a number".into()),
    }
}

/// Seconds written with at most six decimals and 15 digits in all (every time [`write_secs`]
/// writes), read as whole microseconds divided by a million. Both are exact integers in an f64,
/// so the one correctly rounded division is the decimal's nearest f64: bit for bit what
/// `str::parse` gives, without its general algorithm.
fn micros_decimal(s: &[u8]) -> Option<f64> {
    let (neg, b) = match s {
        [b'-', rest @ ..] => (true, rest),
        b => (false, b),
    };
    let (whole, frac) = match b.iter().position(|&c| c == b'.') {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &b[b.len()..]),
    };
    let dot = b.len() > whole.len();
    if whole.is_empty() || (dot && frac.is_empty()) || frac.len() > 6 || whole.len() + 6 > 15 {
        return None;
    }
    let mut us = 0i64;
    for &c in whole.iter().chain(frac) {
        if !c.is_ascii_digit() {
            return None;
        }
        us = us * 10 + (c - b'0') as i64;
    }
    us *= 10i64.pow(6 - frac.len() as u32);
    let x = us as f64 / 1e6;
    Some(if neg { -x } else { x })
}

/// One of serde's names for a unit variant (an error kind, a timeout phase), read by serde itself so
/// the two forms can never disagree.
fn named<T: for<'de> Deserialize<'de>>(v: Val) -> Result<T, String> {
    let name = text(v)?;
    T::deserialize(name.as_str().into_deserializer())
        .map_err(|e: serde::de::value::Error| e.to_string())
}

/// A line as [`encode_request`] writes a plain request that got its answer (an ok outcome, keys
/// in their written order, no escapes, numbers in the forms written), read straight through:
/// most of a journal, read at a fraction of the general parser's cost. Anything else is None and
/// left to [`decode_request`], which reads these lines to the same record.
fn plain_request(b: &[u8]) -> Option<Record> {
    let mut c = Straight { b, at: 0 };
    c.lit(b"{\"k\":\"rq\",\"i\":")?;
    let id = c.uint()?;
    c.lit(b",\"g\":\"")?;
    let group = c.plain_str()?;
    c.lit(b",\"w\":")?;
    let worker = u32::try_from(c.uint()?).ok()?;
    c.lit(b",\"s\":")?;
    let start_s = micros_decimal(c.number()?)?;
    c.lit(b",\"d\":")?;
    let d_ns = c.uint()?;
    let e = c.optional(b",\"e\":", Straight::int)?;
    let status = c.optional(b",\"c\":", |c| u16::try_from(c.uint()?).ok())?;
    let body_bytes = c.optional(b",\"bb\":", Straight::uint)?;
    let connect_s = c.optional(b",\"pc\":", Straight::int)?;
    let headers_s = c.optional(b",\"ph\":", Straight::int)?;
    c.lit(b"}")?;
    if c.at != b.len() {
        return None;
    }
    let t_s =
        derived_end_us(exact_micros(start_s)?, d_ns).saturating_add(e.unwrap_or(0)) as f64 / 1e6;
    Some(Record {
        t_s,
        event: Event::Request {
            id,
            group,
            worker,
            start_s,
            duration_s: nanos_to_secs(d_ns),
            outcome: Outcome::Ok,
            status,
            scheduled_s: None,
            detail: None,
            body_bytes,
            body_cut: false,
            connect_s: connect_s.map(|us| us as f64 / 1e6),
            headers_s: headers_s.map(|us| us as f64 / 1e6),
            handshake_s: None,
            lag_s: None,
            rpc_id: None,
        },
        origin: None,
    })
}

/// [`plain_request`]'s cursor: each step either reads exactly what it expects or gives up.
struct Straight<'a> {
    b: &'a [u8],
    at: usize,
}

impl Straight<'_> {
    fn lit(&mut self, word: &[u8]) -> Option<()> {
        self.b[self.at..]
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    /// An optional key's value: Some(None) when the key does not come next, None when its value
    /// is not read straight.
    fn optional<T>(
        &mut self,
        key: &[u8],
        read: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        match self.lit(key) {
            Some(()) => read(self).map(Some),
            None => Some(None),
        }
    }

    /// A number's bytes, where the general parser would take the same ones: it ends at `,` or `}`.
    fn number(&mut self) -> Option<&[u8]> {
        let rest = &self.b[self.at..];
        let n = rest
            .iter()
            .take_while(|c| c.is_ascii_digit() || matches!(c, b'-' | b'.'))
            .count();
        if !matches!(rest.get(n), Some(b',' | b'}')) {
            return None;
        }
        self.at += n;
        Some(&rest[..n])
    }

    /// An integer of at most 18 digits (as [`short_int`] reads it), in one sweep.
    fn int(&mut self) -> Option<i64> {
        let rest = &self.b[self.at..];
        let neg = rest.first() == Some(&b'-');
        let mut i = neg as usize;
        let mut n = 0i64;
        while let Some(&c) = rest.get(i).filter(|c| c.is_ascii_digit()) {
            if i - neg as usize == 18 {
                return None;
            }
            n = n * 10 + (c - b'0') as i64;
            i += 1;
        }
        if i == neg as usize || !matches!(rest.get(i), Some(b',' | b'}')) {
            return None;
        }
        self.at += i;
        Some(if neg { -n } else { n })
    }

    fn uint(&mut self) -> Option<u64> {
        self.int().and_then(|n| u64::try_from(n).ok())
    }

    /// A string without escapes, up to its closing quote, as UTF-8.
    fn plain_str(&mut self) -> Option<String> {
        let rest = &self.b[self.at..];
        let n = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
        if rest[n] != b'"' {
            return None;
        }
        let s = std::str::from_utf8(&rest[..n]).ok()?;
        self.at += n + 1;
        Some(s.to_owned())
    }
}

fn decode_request(mut p: Parser) -> Result<Record, String> {
    match p.value()? {
        Val::Str(b"rq", false) => {}
        _ => return Err("a compact record of an unknown kind".into()),
    }
    let (mut id, mut group, mut worker, mut start) = (None, None, None, None);
    let (mut d_ns, mut ds, mut e, mut t) = (None, None, None, None);
    let (mut o, mut phase, mut limit, mut x, mut reason) = (None, None, None, None, None);
    let (mut oc, mut status, mut sched, mut detail, mut bb, mut bc, mut og) =
        (None, None, None, None, None, false, None);
    let (mut pc, mut ph, mut pt, mut wl) = (None, None, None, None);
    loop {
        if p.eat(b'}') {
            break;
        }
        if !p.eat(b',') {
            return Err(format!("expected , or }} at column {}", p.at + 1));
        }
        let (key, _) = p.string()?;
        if !p.eat(b':') {
            return Err(format!("expected : at column {}", p.at + 1));
        }
        let v = p.value()?;
        fn set<T>(slot: &mut Option<T>, v: T, key: &[u8]) -> Result<(), String> {
            match slot.replace(v) {
                None => Ok(()),
                Some(_) => Err(format!("duplicate key {}", String::from_utf8_lossy(key))),
            }
        }
        match key {
            b"i" => set(&mut id, int::<u64>(v)?, key)?,
            b"g" => set(&mut group, text(v)?, key)?,
            b"w" => set(&mut worker, int::<u32>(v)?, key)?,
            b"s" => set(&mut start, float(v)?, key)?,
            b"d" => set(&mut d_ns, int::<u64>(v)?, key)?,
            b"ds" => set(&mut ds, float(v)?, key)?,
            b"e" => set(&mut e, int::<i64>(v)?, key)?,
            b"t" => set(&mut t, float(v)?, key)?,
            b"o" => set(&mut o, text(v)?, key)?,
            b"p" => set(&mut phase, named::<TimeoutPhase>(v)?, key)?,
            b"l" => set(&mut limit, float(v)?, key)?,
            b"x" => set(&mut x, named::<ErrorKind>(v)?, key)?,
            b"r" => set(&mut reason, text(v)?, key)?,
            b"oc" => {
                let c = match v {
                    Val::Null => None,
                    v => Some(int::<u16>(v)?),
                };
                set(&mut oc, c, key)?
            }
            b"c" => set(&mut status, int::<u16>(v)?, key)?,
            b"h" => set(&mut sched, float(v)?, key)?,
            b"m" => set(&mut detail, text(v)?, key)?,
            b"bb" => set(&mut bb, int::<u64>(v)?, key)?,
            b"bc" => match v {
                Val::Bool(b) => bc = b,
                _ => return Err("bc is not a boolean".into()),
            },
            b"og" => set(&mut og, int::<u16>(v)?, key)?,
            b"pc" => set(&mut pc, int::<i64>(v)? as f64 / 1e6, key)?,
            b"ph" => set(&mut ph, int::<i64>(v)? as f64 / 1e6, key)?,
            b"pcs" => set(&mut pc, float(v)?, key)?,
            b"phs" => set(&mut ph, float(v)?, key)?,
            b"pt" => set(&mut pt, int::<i64>(v)? as f64 / 1e6, key)?,
            b"pts" => set(&mut pt, float(v)?, key)?,
            b"wl" => set(&mut wl, int::<i64>(v)? as f64 / 1e6, key)?,
            b"wls" => set(&mut wl, float(v)?, key)?,
            _ => {
                return Err(format!(
                    "unknown key {} in a compact request",
                    String::from_utf8_lossy(key)
                ))
            }
        }
    }
    p.ws();
    if p.at != p.b.len() {
        return Err(format!("trailing characters at column {}", p.at + 1));
    }
    let missing = |k: &str| format!("a compact request without {k}");
    let start_s = start.ok_or_else(|| missing("s"))?;
    let duration_s = match (d_ns, ds) {
        (Some(n), None) => nanos_to_secs(n),
        (None, Some(d)) => d,
        _ => return Err("a compact request needs one of d and ds".into()),
    };
    let t_s = match (t, e) {
        (Some(t), None) => t,
        (None, e) => {
            let (Some(s), Some(d)) = (exact_micros(start_s), d_ns) else {
                return Err("a compact request without t whose end cannot be derived".into());
            };
            (derived_end_us(s, d).saturating_add(e.unwrap_or(0))) as f64 / 1e6
        }
        (Some(_), Some(_)) => return Err("a compact request with both t and e".into()),
    };
    let own = |oc: Option<Option<u16>>| oc.unwrap_or(status);
    let outcome = match o.as_deref() {
        None => Outcome::Ok,
        Some("timeout") => Outcome::Timeout {
            phase: phase.ok_or_else(|| missing("p"))?,
            limit_s: limit.ok_or_else(|| missing("l"))?,
        },
        Some("error") => Outcome::Error {
            error: x.ok_or_else(|| missing("x"))?,
            status: own(oc),
        },
        Some("rejected") => Outcome::Rejected {
            status: own(oc),
            reason: reason.ok_or_else(|| missing("r"))?,
        },
        Some(other) => return Err(format!("unknown outcome {other}")),
    };
    Ok(Record {
        t_s,
        event: Event::Request {
            id: id.ok_or_else(|| missing("i"))?,
            group: group.ok_or_else(|| missing("g"))?,
            worker: worker.ok_or_else(|| missing("w"))?,
            start_s,
            duration_s,
            outcome,
            status,
            scheduled_s: sched,
            detail,
            body_bytes: bb,
            body_cut: bc,
            connect_s: pc,
            headers_s: ph,
            handshake_s: pt,
            lag_s: wl,
            rpc_id: None,
        },
        origin: og,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(rec: &Record) -> String {
        let mut out = Vec::new();
        encode(rec, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn request(t_s: f64, start_s: f64, duration_s: f64, outcome: Outcome) -> Record {
        Record {
            t_s,
            event: Event::Request {
                id: 41,
                group: "level4".into(),
                worker: 3,
                start_s,
                duration_s,
                outcome,
                status: Some(200),
                scheduled_s: None,
                detail: None,
                body_bytes: None,
                body_cut: false,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
                rpc_id: None,
            },
            origin: None,
        }
    }

    /// Every error kind; the match makes a new kind fail to compile here until it is listed.
    fn all_kinds() -> Vec<ErrorKind> {
        use ErrorKind::*;
        let all = vec![
            ConnectRefused,
            Connect,
            Reset,
            ClosedBeforeResponse,
            Protocol,
            Http4xx,
            Http5xx,
            Http3xx,
            Rpc,
            ToolError,
            Closed,
            Local,
            Interrupted,
            Cancelled,
            Tls,
            Goaway,
            StreamReset,
            SessionGone,
            Other,
        ];
        for k in &all {
            match k {
                ConnectRefused | Connect | Reset | ClosedBeforeResponse | Protocol | Http4xx
                | Http5xx | Http3xx | Rpc | ToolError | Closed | Local | Interrupted
                | Cancelled | Tls | Goaway | StreamReset | SessionGone | Other => {}
            }
        }
        all
    }

    #[test]
    fn old_journal_lines_read_as_they_always_did_and_as_their_compact_form_does() {
        let old = [
            // As witness wrote them before the compact form (from tests/fuzz).
            r#"{"t_s":0.304122,"kind":"request","id":0,"group":"embed","worker":0,"start_s":0.302414,"duration_s":0.001708849,"outcome":{"kind":"ok"},"status":200}"#,
            r#"{"duration_s":0.000979992,"group":"embed","id":1,"kind":"request","outcome":{"kind":"ok"},"start_s":0.326660,"status":200,"t_s":0.32764,"worker":0}"#,
            r#"{"t_s":2.5,"kind":"request","id":7,"group":"level1","worker":1,"start_s":1.5,"duration_s":1.0,"outcome":{"kind":"timeout","phase":"request","limit_s":1.0},"status":200,"detail":"status 200 arrived, then the body stalled after 10 bytes","body_bytes":10}"#,
            r#"{"t_s":0.01,"kind":"request","id":8,"group":"level1","worker":0,"start_s":0.009,"duration_s":0.000123,"outcome":{"kind":"error","error":"connect_refused"},"detail":"connect: refused"}"#,
            r#"{"t_s":0.02,"kind":"request","id":9,"group":"level1","worker":0,"start_s":0.019,"duration_s":0.000456789,"outcome":{"kind":"error","error":"http5xx","status":502},"status":502}"#,
            r#"{"t_s":0.03,"kind":"request","id":10,"group":"chat","worker":2,"start_s":0.029,"duration_s":0.0002,"outcome":{"kind":"rejected","status":429,"reason":"429 Too Many Requests"},"status":429,"scheduled_s":0.0285,"body_bytes":19,"body_cut":true}"#,
            r#"{"t_s":0.04,"kind":"request","id":11,"group":"level2","worker":0,"start_s":0.039,"duration_s":0.0002,"outcome":{"kind":"ok"},"status":200,"origin":1}"#,
            r#"{"t_s":0.000297,"kind":"gpu_unavailable","reason":"turned off (--gpu off)"}"#,
        ];
        for text in old {
            let rec = decode(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(rec, serde_json::from_str::<Record>(text).unwrap(), "{text}");
            let new = line(&rec);
            assert_eq!(decode(new.as_bytes()).unwrap(), rec, "{text}\n{new}");
            if matches!(rec.event, Event::Request { .. }) {
                assert!(new.starts_with(r#"{"k":"rq","#), "{new}");
                assert!(new.len() < text.len(), "{new}");
            } else {
                assert_eq!(new, text, "other events keep the long form");
            }
        }
    }

    #[test]
    fn a_plain_request_is_compact_and_omits_what_is_implied() {
        let rec = request(1.23469, 1.234567, 0.000123456, Outcome::Ok);
        let text = line(&rec);
        assert_eq!(
            text,
            r#"{"k":"rq","i":41,"g":"level4","w":3,"s":1.234567,"d":123456,"c":200}"#
        );
        assert_eq!(decode(text.as_bytes()).unwrap(), rec);
        // The end a µs away from start + duration is said as a correction, not a whole time.
        let rec = request(1.234689, 1.234567, 0.000123456, Outcome::Ok);
        let text = line(&rec);
        assert!(text.contains(r#""e":-1"#), "{text}");
        assert_eq!(decode(text.as_bytes()).unwrap(), rec);
    }

    #[test]
    fn a_long_run_s_request_stays_within_100_bytes() {
        let mut rec = request(
            86_399.123456 + 12.345678,
            86_399.123456,
            12.345678912,
            Outcome::Ok,
        );
        if let Event::Request {
            id, group, worker, ..
        } = &mut rec.event
        {
            *id = 99_999_999_999;
            *group = "level12".into();
            *worker = 1023;
        }
        rec.t_s = super::super::micros(rec.t_s);
        let text = line(&rec);
        assert!(text.len() <= 100, "{} bytes: {text}", text.len());
        assert_eq!(decode(text.as_bytes()).unwrap(), rec);
    }

    #[test]
    fn every_error_kind_and_timeout_phase_round_trips() {
        for k in all_kinds() {
            for status in [None, Some(502), Some(200)] {
                let rec = request(0.5, 0.25, 0.25, Outcome::Error { error: k, status });
                let text = line(&rec);
                assert_eq!(decode(text.as_bytes()).unwrap(), rec, "{text}");
                let long = serde_json::to_string(&rec).unwrap();
                assert_eq!(decode(long.as_bytes()).unwrap(), rec, "{long}");
            }
        }
        for phase in [TimeoutPhase::Connect, TimeoutPhase::Request] {
            let rec = request(
                3.0,
                1.0,
                2.0,
                Outcome::Timeout {
                    phase,
                    limit_s: 2.0,
                },
            );
            let text = line(&rec);
            assert_eq!(decode(text.as_bytes()).unwrap(), rec, "{text}");
        }
    }

    #[test]
    fn values_the_compact_form_cannot_hold_keep_the_long_form() {
        let rec = request(f64::NAN, 0.25, 0.25, Outcome::Ok);
        assert!(line(&rec).starts_with(r#"{"t_s":"#));
    }

    #[test]
    fn broken_compact_lines_are_errors_not_panics() {
        let good = line(&request(0.5, 0.25, 0.25, Outcome::Ok));
        for cut in 0..good.len() {
            assert!(decode(&good.as_bytes()[..cut]).is_err(), "{}", &good[..cut]);
        }
        for bad in [
            r#"{"k":"rq","i":1,"g":"a","w":0,"s":1,"d":5,"i":2}"#,
            r#"{"k":"rq","i":1,"g":"a","w":0,"s":1,"d":5,"zz":2}"#,
            r#"{"k":"rq","i":-1,"g":"a","w":0,"s":1,"d":5}"#,
            r#"{"k":"rq","i":1,"g":"a","w":0,"s":1,"d":5,"o":"maybe"}"#,
            r#"{"k":"rq","i":1,"g":"a","w":0,"s":1,"d":5,"o":"error","x":"nope"}"#,
            r#"{"k":"rq","i":1,"g":"a","w":0,"s":1,"ds":5.5}"#,
            r#"{"k":"rq","i":1,"g":"a","w":0,"s":1,"d":5} x"#,
            r#"{"k":"zz"}"#,
            "{\"k\":\"rq\",\"i\":1,\"g\":\"\\",
        ] {
            assert!(decode(bad.as_bytes()).is_err(), "{bad}");
        }
        // Spaces between tokens (a reformatted line) are fine.
        let spaced = r#"{ "k" : "rq", "i": 1, "g": "a", "w": 0, "s": 1, "d": 5 }"#;
        assert!(decode(spaced.as_bytes()).is_ok());
    }

    #[test]
    fn the_journal_page_s_examples_read() {
        let readme = include_str!("../../docs/journal.md");
        let lines: Vec<&str> = readme
            .lines()
            .filter(|l| l.starts_with(r#"{"k":"rq""#))
            .collect();
        assert_eq!(lines.len(), 2);
        for l in lines {
            let rec = decode(l.as_bytes()).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert_eq!(line(&rec), l);
        }
    }

    #[test]
    fn merged_records_carry_their_origin() {
        let mut rec = request(0.5, 0.25, 0.25, Outcome::Ok);
        rec.origin = Some(3);
        let text = line(&rec);
        assert!(text.ends_with(r#","og":3}"#), "{text}");
        assert_eq!(decode(text.as_bytes()).unwrap(), rec);
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        let status = proptest::option::of(100u16..600);
        prop_oneof![
            Just(Outcome::Ok),
            (any::<bool>(), time()).prop_map(|(c, limit_s)| Outcome::Timeout {
                phase: if c {
                    TimeoutPhase::Connect
                } else {
                    TimeoutPhase::Request
                },
                limit_s: limit_s.abs(),
            }),
            (0..all_kinds().len(), status.clone()).prop_map(|(k, status)| Outcome::Error {
                error: all_kinds()[k],
                status,
            }),
            (status, ".*").prop_map(|(status, reason)| Outcome::Rejected { status, reason }),
        ]
    }

    /// Seconds as witness makes them (whole µs) and any other finite value.
    fn time() -> impl Strategy<Value = f64> {
        prop_oneof![
            (-1_000_000_000i64..100_000_000_000).prop_map(|us| us as f64 / 1e6),
            -1e7f64..1e7,
            Just(0.0),
            Just(-0.0),
            Just(1e-310),
        ]
    }

    fn duration() -> impl Strategy<Value = f64> {
        prop_oneof![
            (0u64..100_000_000_000).prop_map(|n| Duration::from_nanos(n).as_secs_f64()),
            (0u64..100_000_000).prop_map(|us| us as f64 / 1e6),
            0f64..1e5,
            -1f64..0.0,
        ]
    }

    /// A compact line read by the general parser alone.
    fn general(line: &str) -> Result<Record, String> {
        let mut p = Parser {
            b: line.as_bytes(),
            at: 0,
        };
        assert!(p.compact(), "{line}");
        decode_request(p)
    }

    #[test]
    fn plain_requests_read_straight_as_the_general_parser_reads_them() {
        let plain = r#"{"k":"rq","i":9,"g":"level0","w":19,"s":0.035403,"d":1867254,"e":-1,"c":200,"bb":2,"pc":1224,"ph":1867}"#;
        let r = plain_request(plain.as_bytes()).expect("read straight");
        assert_eq!(format!("{r:?}"), format!("{:?}", general(plain).unwrap()));
        for line in [
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":0,"d":5,"c":204}"#,
            r#"{"k":"rq","i":007,"g":"L","w":0,"s":1.5,"d":1000,"ph":-3}"#,
        ] {
            let r = plain_request(line.as_bytes()).expect(line);
            assert_eq!(
                format!("{r:?}"),
                format!("{:?}", general(line).unwrap()),
                "{line}"
            );
        }
        // Not the written shape: left to the general parser, whatever it makes of them.
        for line in [
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0} "#,
            r#"{"k":"rq","i":1,"g":"L\u0041","w":0,"s":2,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0,"c":200,"c":200}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"d":0,"s":2}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":1.2345678,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":1e3,"d":0}"#,
            r#"{"k":"rq","i":-1,"g":"L","w":0,"s":2,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":4294967296,"s":2,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0,"c":70000}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0,"o":"error","x":"reset"}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0,"e":1.5}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0,"bb":}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0}}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":99999999999,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":-0,"d":0}"#,
            r#"{"k":"rq","i":1,"g":"L","w":0,"s":2,"d":0"#,
        ] {
            assert!(plain_request(line.as_bytes()).is_none(), "{line}");
        }
        let bad_utf8 = b"{\"k\":\"rq\",\"i\":1,\"g\":\"\xff\",\"w\":0,\"s\":2,\"d\":0}";
        assert!(plain_request(bad_utf8).is_none());
        assert!(decode(bad_utf8).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every field of every request, whatever its values, reads back exactly.
        #[test]
        fn every_request_round_trips_exactly(
            id in any::<u64>(),
            group in ".*",
            worker in any::<u32>(),
            start_s in time(),
            duration_s in duration(),
            end in prop_oneof![Just(None), time().prop_map(Some)],
            outcome in outcome(),
            status in proptest::option::of(any::<u16>()),
            scheduled_s in proptest::option::of(time()),
            detail in proptest::option::of(".*"),
            body_bytes in proptest::option::of(any::<u64>()),
            body_cut in any::<bool>(),
            connect_s in proptest::option::of(duration()),
            headers_s in proptest::option::of(duration()),
            handshake_s in proptest::option::of(duration()),
            lag_s in proptest::option::of(duration()),
            origin in proptest::option::of(any::<u16>()),
        ) {
            let t_s = end.unwrap_or(super::super::micros(start_s + duration_s));
            let rec = Record {
                t_s,
                event: Event::Request {
                    id, group, worker, start_s, duration_s, outcome, status, scheduled_s, detail,
                    body_bytes, body_cut, connect_s, headers_s, handshake_s, lag_s,
                    rpc_id: None,
                },
                origin,
            };
            let text = line(&rec);
            let back = decode(text.as_bytes()).unwrap();
            // The straight read of a plain request gives what the general parser gives.
            prop_assert_eq!(format!("{back:?}"), format!("{:?}", general(&text).unwrap()));
            // Bit for bit: -0.0 and 0.0 differ here, as NaN never occurs.
            prop_assert_eq!(format!("{back:?}"), format!("{rec:?}"), "{}", text);
            prop_assert_eq!(&back, &rec);
            let Event::Request { start_s: s, duration_s: d, .. } = back.event else { unreachable!() };
            prop_assert_eq!(s.to_bits(), start_s.to_bits());
            prop_assert_eq!(d.to_bits(), duration_s.to_bits());
            prop_assert_eq!(back.t_s.to_bits(), t_s.to_bits());
        }

        /// The short readers of numbers give what `str::parse` gives, bit for bit, or leave it to it.
        #[test]
        fn numbers_read_short_as_str_parse_reads_them(
            s in "-?[0-9]{0,12}(\\.[0-9]{0,8})?",
            n in any::<i64>(),
        ) {
            if let Some(x) = micros_decimal(s.as_bytes()) {
                prop_assert_eq!(x.to_bits(), s.parse::<f64>().unwrap().to_bits(), "{}", s);
            }
            if let Some(i) = short_int(s.as_bytes()) {
                prop_assert_eq!(i128::from(i), s.parse::<i128>().unwrap(), "{}", s);
            }
            let text = n.to_string();
            prop_assert_eq!(short_int(text.as_bytes()).unwrap_or(n), n);
            let secs = format!("{}.{:06}", n / 1_000_000 % 1_000_000_000, (n % 1_000_000).abs());
            prop_assert_eq!(
                micros_decimal(secs.as_bytes()).map(f64::to_bits),
                Some(secs.parse::<f64>().unwrap().to_bits()),
                "{}", secs
            );
        }

        /// Strings are escaped exactly as serde_json escapes them: what secret scrubbing looks for.
        #[test]
        fn strings_are_escaped_as_serde_json_escapes_them(s in ".*") {
            let mut out = Vec::new();
            write_str(&mut out, &s);
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&s).unwrap());
        }
    }
}
