//! One truth in every view: the terminal report, the JSON and the HTML of the same journal give each
//! level (or replay speed), soak kind and call wrap saw one name, one verdict and the same figures,
//! as a person reads them. [`views_agree`] is the one check, called on journals of load, replay,
//! soak and wrap runs by the tests that make them (and here, on a load and a soak of its own).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// `witness report JOURNAL ARGS…`'s stdout.
fn report(journal: &Path, args: &[&str]) -> String {
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(journal)
            .args(args),
        Duration::from_secs(60),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A latency figure as the views show it: the unit that fits, or "(n=K)" for a percentile the
/// figures say rests on too few requests.
fn figure(lat: &Value, key: &str) -> String {
    if lat.is_null() {
        return "-".into();
    }
    let few = lat["too_few_for"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == key));
    if few {
        return format!("(n={})", lat["count"]);
    }
    shown_duration(
        lat[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {lat}")),
    )
}

/// The cells of the HTML table row that begins with `first` (a `<td…>` cell's text).
fn html_row(html: &str, first: &str) -> Option<Vec<String>> {
    html.split("<tr").skip(1).find_map(|row| {
        let row = row.split("</tr>").next()?;
        let cells: Vec<String> = row
            .split("<td")
            .skip(1)
            .map(|c| {
                let inner = c.split_once('>').map_or("", |x| x.1);
                let inner = inner.split("</td>").next().unwrap_or("");
                inner.replace("<b>", "").replace("</b>", "")
            })
            .collect();
        (cells.first().map(String::as_str) == Some(first)).then_some(cells)
    })
}

/// The terminal, JSON and HTML views of `journal` agree on every level's (or speed's) name,
/// verdict and figures, every soak kind's counts and figures, every call wrap saw, and the run's
/// verdict.
pub fn views_agree(journal: &Path) {
    let json: Value = serde_json::from_str(&report(journal, &["--format", "json"])).unwrap();
    let text = report(journal, &[]);
    let html = report(journal, &["--format", "html"]);
    let ctx = |what: &str| {
        format!(
            "{what}\n--- text:\n{text}\n--- json levels: {}",
            json["levels"]
        )
    };

    if let Some(v) = json["verdict"].as_str() {
        let v = v.to_uppercase();
        assert!(text.contains(&format!("verdict: {v}")), "{}", ctx(&v));
    }
    for l in json["levels"].as_array().into_iter().flatten() {
        let name = l["name"].as_str().expect("every level has a name");
        let verdict = l["verdict"].as_str().unwrap().to_uppercase();
        let lat = &l["latency"];
        let want = [figure(lat, "max"), figure(lat, "p50"), figure(lat, "p99")];
        if verdict != "SKIPPED" {
            let row = text
                .lines()
                .find(|r| {
                    r.split_whitespace().next() == Some(name)
                        && r.contains(&verdict)
                        && r.split_whitespace().count() > 8
                })
                .unwrap_or_else(|| {
                    panic!("{}", ctx(&format!("no row for level {name} {verdict}")))
                });
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(
                cells[5..8],
                want,
                "{}",
                ctx(&format!("level {name}: {row}"))
            );
        }
        let cells = html_row(&html, name).unwrap_or_else(|| panic!("no HTML row for level {name}"));
        assert_eq!(cells[1], verdict, "HTML level {name}: {cells:?}");
        if verdict != "SKIPPED" {
            assert_eq!(cells[6..9], want, "HTML level {name}: {cells:?}");
        }
    }
    if let Some(kinds) = json["kinds"].as_object() {
        for (name, k) in kinds {
            let row = text
                .lines()
                .find(|r| {
                    r.trim_start()
                        .strip_prefix(name.as_str())
                        .is_some_and(|rest| {
                            rest.starts_with(' ') && rest.trim_start().starts_with("requests=")
                        })
                })
                .unwrap_or_else(|| panic!("{}", ctx(&format!("no row for soak kind {name}"))));
            for key in ["requests", "ok", "rejected", "timeouts", "errors"] {
                assert!(
                    row.contains(&format!(" {key}={}", k[key])),
                    "{}",
                    ctx(&format!("soak kind {name}'s {key}: {row}"))
                );
            }
            let lat = &k["latency"];
            if !lat.is_null() {
                for key in ["p50", "p95", "p99", "max"] {
                    let w = figure(lat, key);
                    assert!(
                        row.contains(&format!(" {key}={w}")),
                        "{}",
                        ctx(&format!("soak kind {name}'s {key} {w}: {row}"))
                    );
                }
            }
            let cells =
                html_row(&html, name).unwrap_or_else(|| panic!("no HTML row for kind {name}"));
            let counts: Vec<String> = ["requests", "ok", "rejected", "timeouts", "errors"]
                .iter()
                .map(|key| k[key].to_string())
                .collect();
            assert_eq!(cells[1..6], counts, "HTML kind {name}: {cells:?}");
            if !lat.is_null() {
                let want: Vec<String> = ["p50", "p95", "p99", "max"]
                    .iter()
                    .map(|key| figure(lat, key))
                    .collect();
                assert_eq!(cells[6..10], want, "HTML kind {name}: {cells:?}");
            }
        }
    }
    for c in json["observed"]["calls"].as_array().into_iter().flatten() {
        let label = c["label"].as_str().unwrap();
        let counts = &c["counts"];
        let want: Vec<String> = [
            c["calls"].to_string(),
            counts["ok"].to_string(),
            counts["error"].to_string(),
            counts["rejected"].to_string(),
            counts["cancelled"].to_string(),
            figure(&c["latency"], "p50"),
            figure(&c["latency"], "p99"),
            figure(&c["latency"], "max"),
        ]
        .into();
        let row = text
            .lines()
            .find_map(|r| r.trim_start().strip_prefix(&format!("{label} ")))
            .unwrap_or_else(|| panic!("{}", ctx(&format!("no row for call {label}"))));
        let cells: Vec<String> = row.split_whitespace().take(8).map(String::from).collect();
        assert_eq!(cells, want, "{}", ctx(&format!("call {label}: {row}")));
        let cells =
            html_row(&html, label).unwrap_or_else(|| panic!("no HTML row for call {label}"));
        assert_eq!(cells[1..9], want[..], "HTML call {label}: {cells:?}");
    }
}

#[test]
fn a_load_s_levels_read_the_same_in_every_view() {
    let dir = tempdir("one-truth-load");
    let port = free_port().to_string();
    let journal = dir.join("j.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1,2,4", "--rounds", "60", "--settle", "50ms"])
            .args(["--gpu", "off", "--journal"])
            .arg(&journal)
            .args(["--", toy().to_str().unwrap(), "--port", &port]),
        Duration::from_secs(90),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    views_agree(&journal);
}

#[test]
fn a_soak_s_kinds_read_the_same_in_every_view() {
    let dir = tempdir("one-truth-soak");
    let port = free_port().to_string();
    let journal = dir.join("j.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(repo().join("examples/plans/quick.toml"))
            .args(["--duration", "3s", "--gpu", "off"])
            .args(["--base-url", &format!("http://127.0.0.1:{port}")])
            .arg("--journal")
            .arg(&journal)
            .args(["--", toy().to_str().unwrap(), "--port", &port]),
        Duration::from_secs(90),
    );
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    views_agree(&journal);
}

/// The check can fail: a row whose figure differs from the JSON's is found.
#[test]
fn the_check_finds_a_figure_that_differs() {
    let lat: Value =
        serde_json::json!({"count": 3, "p50": 0.0042, "max": 0.0104, "too_few_for": ["p99"]});
    assert_eq!(figure(&lat, "p50"), "4.20ms");
    assert_eq!(figure(&lat, "max"), "10.4ms");
    assert_eq!(figure(&lat, "p99"), "(n=3)");
    let html = "<table><tr><td class=\"n\">4×</td><td><b>PASS</b></td></tr></table>";
    assert_eq!(
        html_row(html, "4×"),
        Some(vec!["4×".to_string(), "PASS".to_string()])
    );
    assert_eq!(html_row(html, "4"), None);
}
