//! The terminal view: the annotated timeline in aligned columns, then the suspicions. Colour only when
//! the stream is a terminal.

use super::View;
use crate::analyze::Analysis;

pub struct Terminal {
    pub colour: bool,
}

impl Terminal {
    pub fn for_stderr() -> Self {
        use std::io::IsTerminal;
        Self {
            colour: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, severity: &str, s: &str) -> String {
        let code = match severity {
            "bad" => "31",
            "warn" => "33",
            _ => return s.to_string(),
        };
        if self.colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

impl View for Terminal {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        let mut o = String::new();
        o.push_str(&timeline(self, a));
        Ok(o.into_bytes())
    }
}

/// The timeline block shared by every mode's terminal output.
pub fn timeline(t: &Terminal, a: &Analysis) -> String {
    let mut o = String::new();
    o.push_str(
        "witness: lifecycle timeline (t = seconds since the run began; age = process age)\n",
    );
    o.push_str(&format!(
        "  {:>9}  {:>9}  {:<12} {:>7}  what\n",
        "t", "age", "event", "pid"
    ));
    for e in &a.timeline {
        let age = e
            .age_s
            .map(|x| format!("{x:.2}s"))
            .unwrap_or_else(|| "-".into());
        let pid = e.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        let line = format!(
            "  {:>8.3}s  {:>9}  {:<12} {:>7}  {}",
            e.t_s, age, e.kind, pid, e.text
        );
        o.push_str(&t.paint(&e.severity, &line));
        o.push('\n');
    }
    if a.restarts > 0 {
        o.push_str(&format!("restarts: {}\n", a.restarts));
    }
    if a.suspicions.is_empty() {
        o.push_str("suspicions: none\n");
    } else {
        o.push_str("suspicions:\n");
        for s in &a.suspicions {
            o.push_str(&t.paint("bad", &format!("  ! {}", s.detail)));
            o.push('\n');
        }
    }
    if let Some(p) = &a.partial {
        o.push_str(&t.paint("warn", p));
        o.push('\n');
    }
    o
}
