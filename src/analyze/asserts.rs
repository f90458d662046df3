//! Thresholds a team writes down (`--assert EXPR`, a soak plan's `asserts`): a small grammar parsed
//! once, each judged from the analysis (one decision), with the value it measured. The seed's own
//! rules stay; a broken threshold fails the run beside them.
//!
//! ```text
//! EXPR   := FIGURE [SCOPE] OP VALUE
//! FIGURE := p50 | p95 | p99 | max | mean | error_rate | timeout_rate | rejected_rate | rps
//!         | restarts | timers | exits
//! SCOPE  := @LEVEL (@8 workers, @4x a replay speed, @200/s a rate) | [KIND] (a soak kind:
//!           [GET /api], [embed]; a replay's kind of call: [tools/call search])
//! OP     := < | <= | > | >= | == | !=
//! VALUE  := 300ms | 1.5s | 250us | 1% | 0.01 | 12
//! ```
//!
//! Per-request figures without a scope hold at every level (the worst one is the value shown), or
//! over a soak's totals. A percentile from too few requests fails, saying so: one request is no p99.

use serde::Serialize;

use super::Analysis;
use crate::stats::Latency;

/// The figures a threshold may name.
const FIGURES: [&str; 12] = [
    "p50",
    "p95",
    "p99",
    "max",
    "mean",
    "error_rate",
    "timeout_rate",
    "rejected_rate",
    "rps",
    "restarts",
    "timers",
    "exits",
];

/// The grammar, as a usage error shows it.
pub const GRAMMAR: &str = "FIGURE[@LEVEL|[KIND]] OP VALUE, e.g. 'p95@8 < 300ms', 'error_rate < 1%', 'restarts == 0', 'p99[GET /api] < 1s'; FIGURE is one of p50, p95, p99, max, mean, error_rate, timeout_rate, rejected_rate, rps, restarts, timers, exits; OP one of < <= > >= == !=";

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
enum Unit {
    Seconds,
    Fraction,
    Count,
    PerSecond,
}

#[derive(Clone, Debug, PartialEq)]
enum Scope {
    All,
    Level(String),
    Kind(String),
}

/// One threshold, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Assert {
    pub text: String,
    figure: &'static str,
    scope: Scope,
    op: &'static str,
    value: f64,
}

/// A threshold judged: whether it held, and the value the run measured, as a person reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judged {
    pub expr: String,
    pub ok: bool,
    /// The measured value in the figure's own unit (seconds, a fraction, a count, per second);
    /// None when there was none to measure.
    pub value: Option<f64>,
    /// "212ms", "3.2 % (26 of 812)", "too few requests for a p99 (n=5)".
    pub measured: String,
    /// Where the value was read: "level 8", "every level (the worst: level 4)", "soak kind embed".
    #[serde(skip_serializing_if = "String::is_empty")]
    pub at: String,
}

impl Judged {
    /// "✓ p95@8 < 300ms: 212ms at level 8" / "✗ error_rate < 1%: 3.2 % (26 of 812) …".
    pub fn line(&self) -> String {
        let at = if self.at.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.at)
        };
        format!(
            "{} {}: {}{at}",
            if self.ok { "✓" } else { "✗" },
            self.expr,
            self.measured
        )
    }
}

fn unit_of(figure: &str) -> Unit {
    match figure {
        "p50" | "p95" | "p99" | "max" | "mean" => Unit::Seconds,
        "error_rate" | "timeout_rate" | "rejected_rate" => Unit::Fraction,
        "rps" => Unit::PerSecond,
        _ => Unit::Count,
    }
}

/// Parses one threshold; the error names what was wrong and the grammar.
pub fn parse(text: &str) -> Result<Assert, String> {
    let t = text.trim();
    let bad = |why: String| format!("{why}; write {GRAMMAR}");
    let figure_end = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(t.len());
    let name = &t[..figure_end];
    let Some(figure) = FIGURES.iter().copied().find(|f| *f == name) else {
        let near = FIGURES
            .iter()
            .find(|f| f.starts_with(&name.chars().take(2).collect::<String>()))
            .map(|f| format!(" (did you mean {f}?)"))
            .unwrap_or_default();
        return Err(bad(format!(
            "'{name}' is not a figure witness measures{near}"
        )));
    };
    let mut rest = t[figure_end..].trim_start();
    let scope = if let Some(r) = rest.strip_prefix('@') {
        let end = r
            .find(|c: char| c.is_whitespace() || "<>=!".contains(c))
            .unwrap_or(r.len());
        let level = &r[..end];
        if level.is_empty() {
            return Err(bad("'@' names no level".into()));
        }
        rest = r[end..].trim_start();
        Scope::Level(level.replace('x', "×"))
    } else if let Some(r) = rest.strip_prefix('[') {
        let Some(end) = r.find(']') else {
            return Err(bad("'[' without its ']'".into()));
        };
        let kind = r[..end].trim();
        if kind.is_empty() {
            return Err(bad("'[]' names no kind".into()));
        }
        rest = r[end + 1..].trim_start();
        Scope::Kind(kind.to_string())
    } else {
        Scope::All
    };
    if matches!(figure, "restarts" | "timers" | "exits") && scope != Scope::All {
        return Err(bad(format!(
            "{figure} counts the whole run: it takes no scope"
        )));
    }
    let op = ["<=", ">=", "==", "!=", "<", ">"]
        .into_iter()
        .find(|o| rest.starts_with(o))
        .ok_or_else(|| bad(format!("no comparison after {figure}")))?;
    let v = rest[op.len()..].trim();
    let value = value_of(v, unit_of(figure)).map_err(bad)?;
    Ok(Assert {
        text: t.to_string(),
        figure,
        scope,
        op,
        value,
    })
}

/// A value in the figure's unit: a duration for a time, a percentage or fraction for a rate, a
/// number for a count or a speed.
fn value_of(v: &str, unit: Unit) -> Result<f64, String> {
    if v.is_empty() {
        return Err("no value to compare with".into());
    }
    let num = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("'{v}' is not a value"))
    };
    match unit {
        Unit::Seconds => {
            for (suffix, scale) in [("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0)] {
                if let Some(n) = v.strip_suffix(suffix) {
                    return num(n).map(|x| x * scale);
                }
            }
            Err(format!(
                "'{v}' has no unit: a time takes one (300ms, 1.5s, 250us)"
            ))
        }
        Unit::Fraction => match v.strip_suffix('%') {
            Some(n) => num(n).map(|x| x / 100.0),
            None => {
                let x = num(v)?;
                if x > 1.0 {
                    Err(format!("'{v}' is more than 1: write a rate as 1% or 0.01"))
                } else {
                    Ok(x)
                }
            }
        },
        Unit::PerSecond => num(v.strip_suffix("/s").unwrap_or(v)),
        Unit::Count => num(v),
    }
}

pub(crate) fn holds(x: f64, op: &str, v: f64) -> bool {
    // Within a nanosecond (or a billionth) a figure is its threshold.
    let eq = (x - v).abs() <= 1e-9 * v.abs().max(1.0);
    match op {
        "<" => x < v && !eq,
        "<=" => x < v || eq,
        ">" => x > v && !eq,
        ">=" => x > v || eq,
        "==" => eq,
        _ => !eq,
    }
}

/// What a group of requests measured: counts and latency, over a span of time.
struct Group<'a> {
    name: String,
    ok: u64,
    timeout: u64,
    error: u64,
    rejected: u64,
    latency: Option<&'a Latency>,
    span_s: Option<f64>,
}

impl Group<'_> {
    fn total(&self) -> u64 {
        self.ok + self.timeout + self.error + self.rejected
    }

    /// The figure's value here, or why there is none.
    fn figure(&self, f: &str) -> Result<(f64, String), String> {
        let rate = |n: u64, what: &str| {
            let t = self.total();
            if t == 0 {
                return Err("no request".to_string());
            }
            let x = n as f64 / t as f64;
            Ok((x, format!("{:.1} % ({n} of {t}{what})", x * 100.0)))
        };
        match f {
            "error_rate" => rate(self.error + self.timeout, " failed"),
            "timeout_rate" => rate(self.timeout, " timed out"),
            "rejected_rate" => rate(self.rejected, " refused"),
            "rps" => match self.span_s.filter(|s| *s > 0.0) {
                Some(s) => {
                    let x = self.ok as f64 / s;
                    Ok((
                        x,
                        format!("{x:.1}/s ({} ok in {})", self.ok, crate::journal::secs(s)),
                    ))
                }
                None => Err("no span of time to divide by".into()),
            },
            _ => {
                let Some(l) = self.latency else {
                    return Err("no ok request".into());
                };
                let x = match f {
                    "p50" => l.p50,
                    "p95" => l.p95,
                    "p99" => l.p99,
                    "max" => l.max,
                    _ => l.mean,
                };
                if matches!(f, "p50" | "p95" | "p99") && !l.enough_for(f) {
                    return Err(format!("too few requests for a {f} (n={})", l.count));
                }
                Ok((x, crate::units::took(x)))
            }
        }
    }
}

/// The groups a scope names, from a load's levels or a soak's kinds.
fn groups<'a>(a: &'a Analysis, scope: &Scope) -> Result<Vec<Group<'a>>, String> {
    if let Some(l) = &a.load {
        let all: Vec<Group> = l
            .levels
            .iter()
            .filter(|r| r.verdict != "skipped")
            .map(|r| Group {
                name: format!("level {}", r.name()),
                ok: r.counts.ok,
                timeout: r.counts.timeout,
                error: r.counts.error,
                rejected: r.counts.rejected,
                latency: r.latency.as_ref(),
                span_s: r.end_t_s.map(|e| e - r.start_t_s),
            })
            .collect();
        return match scope {
            Scope::All => Ok(all),
            Scope::Level(n) => {
                let want = format!("level {n}");
                let found: Vec<Group> = all.into_iter().filter(|g| g.name == want).collect();
                if found.is_empty() {
                    Err(format!("no level {n} in this run"))
                } else {
                    Ok(found)
                }
            }
            Scope::Kind(k) => Err(format!(
                "[{k}] names a kind: a load's levels are named with @ (@8, @4x)"
            )),
        };
    }
    if let Some(s) = &a.soak {
        let kind = |k: &'a super::soak::KindRow, name: String| Group {
            name,
            ok: k.ok,
            timeout: k.timeouts,
            error: k.errors,
            rejected: k.rejected,
            latency: k.latency.as_ref(),
            span_s: Some(s.duration_achieved_s),
        };
        return match scope {
            Scope::All => Ok(vec![kind(&s.totals, "the whole soak".into())]),
            Scope::Kind(k) => s
                .kinds
                .iter()
                .find(|x| x.name == *k)
                .map(|x| vec![kind(x, format!("soak kind {k}"))])
                .ok_or_else(|| format!("no soak kind {k} in this run")),
            Scope::Level(n) => Err(format!(
                "@{n} names a level: a soak's kinds are named in brackets ([GET /api])"
            )),
        };
    }
    Err("this run has no levels or soak kinds to measure".into())
}

/// Judges each threshold, as written, from the analysis; one a journal holds that this witness
/// cannot read fails, saying why (never dropped).
pub fn judge_texts(texts: &[String], a: &Analysis) -> Vec<Judged> {
    texts
        .iter()
        .map(|t| match parse(t) {
            Ok(x) => judge_one(&x, a),
            Err(why) => Judged {
                expr: t.clone(),
                ok: false,
                value: None,
                measured: format!("not a threshold witness reads: {why}"),
                at: String::new(),
            },
        })
        .collect()
}

/// The thresholds already broken by what the run measured so far (`--assert-abort`, judged after
/// each level): only a measured value breaks one here — one scoped to a level not run yet (no such
/// level so far) or with too few requests for its percentile has no value, and waits.
pub fn broken_so_far(texts: &[String], a: &Analysis) -> Vec<Judged> {
    texts
        .iter()
        .filter_map(|t| parse(t).ok())
        .map(|x| judge_one(&x, a))
        .filter(|j| !j.ok && j.value.is_some())
        .collect()
}

fn judge_one(x: &Assert, a: &Analysis) -> Judged {
    let fail = |measured: String| Judged {
        expr: x.text.clone(),
        ok: false,
        value: None,
        measured,
        at: String::new(),
    };
    let count = |n: usize, what: &str| {
        let v = n as f64;
        Judged {
            expr: x.text.clone(),
            ok: holds(v, x.op, x.value),
            value: Some(v),
            measured: format!("{n} {what}"),
            at: String::new(),
        }
    };
    match x.figure {
        "restarts" => return count(a.restarts as usize, "in the run"),
        "timers" => {
            let n = a
                .suspicions
                .iter()
                .filter(|s| s.kind.as_str().ends_with("_timer"))
                .count();
            return count(n, "timer suspicion(s)");
        }
        "exits" => {
            let n = a
                .processes
                .iter()
                .filter(|p| p.exit_t_s.is_some() && !p.requested)
                .count();
            return count(n, "exit(s) witness did not ask for");
        }
        _ => {}
    }
    let groups = match groups(a, &x.scope) {
        Ok(g) => g,
        Err(why) => return fail(why),
    };
    let mut worst: Option<(f64, String, String)> = None;
    let mut broke: Option<(f64, String, String)> = None;
    for g in &groups {
        let (v, shown) = match g.figure(x.figure) {
            Ok(v) => v,
            Err(why) => {
                return Judged {
                    at: g.name.clone(),
                    ..fail(why)
                }
            }
        };
        if !holds(v, x.op, x.value) && broke.is_none() {
            broke = Some((v, shown.clone(), g.name.clone()));
        }
        let worse = match &worst {
            None => true,
            Some((w, ..)) => match x.op {
                "<" | "<=" => v > *w,
                ">" | ">=" => v < *w,
                _ => false,
            },
        };
        if worse {
            worst = Some((v, shown, g.name.clone()));
        }
    }
    let ok = broke.is_none();
    let Some((v, shown, at)) = broke.or(worst) else {
        return fail("nothing measured".into());
    };
    let at = if groups.len() > 1 && ok {
        format!("every level; the worst: {at}")
    } else {
        at
    };
    Judged {
        expr: x.text.clone(),
        ok,
        value: Some(v),
        measured: shown,
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_reads_figures_scopes_operators_and_units() {
        let a = parse("p95@8 < 300ms").unwrap();
        assert_eq!(
            (a.figure, a.scope.clone(), a.op, a.value),
            ("p95", Scope::Level("8".into()), "<", 0.3)
        );
        let a = parse("error_rate < 1%").unwrap();
        assert_eq!((a.figure, a.value), ("error_rate", 0.01));
        let a = parse("p99[GET /api] <= 1.5s").unwrap();
        assert_eq!(a.scope, Scope::Kind("GET /api".into()));
        assert_eq!(
            parse("p99@4x < 1s").unwrap().scope,
            Scope::Level("4×".into())
        );
        assert_eq!(parse("restarts == 0").unwrap().value, 0.0);
        assert_eq!(parse("rps@8 >= 100/s").unwrap().value, 100.0);
        assert_eq!(parse("max < 250us").unwrap().value, 250e-6);
    }

    #[test]
    fn a_typo_is_refused_with_the_grammar() {
        for (bad, says) in [
            (
                "p59 < 1s",
                "'p59' is not a figure witness measures (did you mean p50?)",
            ),
            ("p95 < 300", "'300' has no unit"),
            ("p95 300ms", "no comparison after p95"),
            ("error_rate < 5", "'5' is more than 1"),
            ("restarts@8 == 0", "restarts counts the whole run"),
            ("p95[GET /api < 1s", "'[' without its ']'"),
            ("p95@ < 1s", "'@' names no level"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("write FIGURE[@LEVEL|[KIND]] OP VALUE"), "{e}");
        }
    }

    #[test]
    fn comparisons_hold_as_written() {
        assert!(holds(0.2, "<", 0.3) && !holds(0.3, "<", 0.3) && holds(0.3, "<=", 0.3));
        assert!(holds(2.0, ">", 1.0) && !holds(1.0, ">", 1.0) && holds(1.0, ">=", 1.0));
        assert!(holds(0.0, "==", 0.0) && holds(1.0, "!=", 0.0) && !holds(0.0, "!=", 0.0));
    }
}
