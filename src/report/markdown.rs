//! The GitHub Actions step summary (Markdown, appended to `$GITHUB_STEP_SUMMARY` when it is set):
//! the verdict, each level's row and each threshold, in the words of the terminal view.

use super::View;
use crate::analyze::Analysis;
use crate::units::took;

pub struct Markdown;

/// A table cell: no pipe or line break of the text may break the table.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

impl View for Markdown {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        let mut o = String::new();
        let verdict = a
            .load
            .as_ref()
            .map(|l| l.verdict.clone())
            .or_else(|| a.soak.as_ref().map(|s| s.verdict.clone()))
            .unwrap_or_else(|| "ended".into());
        let broken = a.asserts.iter().filter(|j| !j.ok).count();
        o.push_str(&format!(
            "## witness {}: {}{}\n\n",
            a.mode,
            verdict.to_uppercase(),
            if broken > 0 {
                format!(", {broken} threshold(s) broken")
            } else {
                String::new()
            }
        ));
        if let Some(l) = &a.load {
            o.push_str(
                "| level | verdict | ok | timeout | error | rejected | max | p50 | p99 | why |\n",
            );
            o.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
            for r in &l.levels {
                let lat = r.latency.as_ref();
                let pct = |name: &str| lat.map(|x| x.shown(name, took)).unwrap_or("-".into());
                o.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    cell(&r.name()),
                    r.verdict.to_uppercase(),
                    r.counts.ok,
                    r.counts.timeout,
                    r.counts.error,
                    r.counts.rejected,
                    lat.map(|x| took(x.max)).unwrap_or("-".into()),
                    pct("p50"),
                    pct("p99"),
                    cell(&r.reasons.join("; "))
                ));
            }
            o.push('\n');
        }
        if let Some(s) = &a.soak {
            o.push_str(&format!(
                "Soak: {} requests, {} ok, {} errors, {} timeouts; {}\n\n",
                s.totals.requests,
                s.totals.ok,
                s.totals.errors,
                s.totals.timeouts,
                cell(&s.reasons.join("; "))
            ));
        }
        if !a.asserts.is_empty() {
            o.push_str("Thresholds:\n\n");
            for j in &a.asserts {
                o.push_str(&format!("- {}\n", cell(&j.line())));
            }
            o.push('\n');
        }
        for s in &a.suspicions {
            o.push_str(&format!("> ! {}\n", cell(&s.detail)));
        }
        Ok(o.into_bytes())
    }
}
