//! The HTML timeline read as a person would, checked on its structure from real runs: every lane
//! has a name, an axis title and (for a value lane) a scale with its unit; the legend explains each
//! glyph the picture draws; a name cut short carries its full text on hover; histogram labels do not
//! run into each other; a lane is drawn only with data in it. And the README's picture
//! (docs/timeline.png, made by scripts/timeline-png.sh) shows no lane the demo's HTML has lost: the
//! script lists the lanes it screenshotted in docs/timeline.lanes.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn mcp_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"))
}

/// `witness load ARGS --html H -- SERVER…`, bounded; returns the page.
fn load_html(dir: &Path, args: &[&str], server: &[&str]) -> String {
    let html = dir.join("t.html");
    let mut cmd = Command::new(witness());
    cmd.arg("load")
        .args(args)
        .arg("--journal")
        .arg(dir.join("j.jsonl"))
        .arg("--report")
        .arg(dir.join("r.json"))
        .arg("--html")
        .arg(&html)
        // A busy test machine must not trip the refusal of a slow network (exit 3).
        .args(["--max-connect-floor", "5s"]);
    if !server.is_empty() {
        cmd.arg("--").args(server);
    }
    let out = run_bounded(&mut cmd, Duration::from_secs(120));
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "witness load: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&html).expect("the HTML timeline")
}

/// The part of the page from `<svg id="ID"` to its `</svg>`.
fn svg<'a>(page: &'a str, id: &str) -> &'a str {
    let from = page
        .find(&format!("<svg id=\"{id}\""))
        .unwrap_or_else(|| panic!("no svg #{id}"));
    let rest = &page[from..];
    &rest[..rest.find("</svg>").expect("the svg's end") + 6]
}

/// The value of ` attr="…"` in the first tag of `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let head = &tag[..tag.find('>').unwrap_or(tag.len())];
    head.split(&format!(" {name}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
}

/// The text an element shows: its content with any `<title>…</title>` (hover text) taken out.
fn shown(content: &str) -> String {
    let mut s = content.to_string();
    while let (Some(a), Some(b)) = (s.find("<title>"), s.find("</title>")) {
        s.replace_range(a..b + 8, "");
    }
    s
}

/// Every `<text …>…</text>` in `part`: (its opening tag, its raw content).
fn texts(part: &str) -> Vec<(&str, &str)> {
    part.split("<text ")
        .skip(1)
        .filter_map(|t| {
            let (tag, rest) = t.split_once('>')?;
            Some((tag, rest.split("</text>").next()?))
        })
        .collect()
}

/// A lane of the timeline: `<g class="lane" data-lane=…>` and everything inside it.
struct Lane<'a> {
    id: &'a str,
    kind: &'a str,
    unit: Option<&'a str>,
    body: &'a str,
}

fn lanes(timeline: &str) -> Vec<Lane<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = timeline[at..].find("<g class=\"lane\" data-lane=\"") {
        let start = at + i;
        // Its matching </g>, counting the groups opened inside it.
        let mut depth = 0;
        let mut j = start;
        let end = loop {
            let open = timeline[j..].find("<g").map(|k| j + k);
            let close = timeline[j..].find("</g>").map(|k| j + k).expect("</g>");
            match open {
                Some(o) if o < close => {
                    depth += 1;
                    j = o + 2;
                }
                _ => {
                    depth -= 1;
                    j = close + 4;
                    if depth == 0 {
                        break j;
                    }
                }
            }
        };
        let body = &timeline[start..end];
        out.push(Lane {
            id: attr(body, "data-lane").unwrap(),
            kind: attr(body, "data-kind").unwrap(),
            unit: attr(body, "data-unit"),
            body,
        });
        at = end;
    }
    out
}

/// What a value lane's scale has to read in, by its `data-unit`.
fn unit_ok(unit: &str, tick: &str) -> bool {
    match unit {
        "bytes" => ["KiB", "MiB", "GiB"].iter().any(|u| tick.ends_with(u)),
        "count" | "plain" => tick.chars().any(|c| c.is_ascii_digit()),
        u => tick.ends_with(u),
    }
}

/// Class tokens that lay the picture out and mean nothing a legend must explain.
const LAYOUT: &[&str] = &[
    "grid", "axis", "chartbg", "levelbg", "alt", "lead", "tp", "lat", "lat-pt",
];

/// Everything a reader needs to read the page's timeline, asserted on its structure.
fn assert_readable(page: &str, what: &str) {
    let timeline = svg(page, "timeline");
    let lanes = lanes(timeline);
    assert!(!lanes.is_empty(), "{what}: no lanes");
    for l in &lanes {
        let name = texts(l.body)
            .into_iter()
            .find(|(tag, _)| tag.starts_with("class=\"lane\""))
            .map(|(_, c)| shown(c));
        assert!(
            name.as_deref().is_some_and(|n| !n.trim().is_empty()),
            "{what}: lane {} has no name",
            l.id
        );
        let axis: Vec<String> = texts(l.body)
            .into_iter()
            .filter(|(tag, _)| tag.starts_with("class=\"sub lane-axis\""))
            .map(|(_, c)| shown(c))
            .collect();
        assert!(
            axis.iter().any(|a| !a.trim().is_empty()),
            "{what}: lane {} has no axis title",
            l.id
        );
        if l.kind == "value" {
            let unit = l
                .unit
                .unwrap_or_else(|| panic!("{what}: value lane {} names no unit", l.id));
            let ticks: Vec<String> = texts(l.body)
                .into_iter()
                .filter(|(tag, _)| tag.starts_with("class=\"tick\""))
                .map(|(_, c)| shown(c))
                .collect();
            assert!(
                ticks.len() >= 2,
                "{what}: lane {} has no scale: ticks {ticks:?}",
                l.id
            );
            assert!(
                ticks.iter().any(|t| unit_ok(unit, t)),
                "{what}: lane {}'s scale {ticks:?} never says its unit ({unit})",
                l.id
            );
        }
        // A lane is drawn only with something in it.
        let marks = ["<rect ", "<circle ", "<path ", "<polyline "]
            .iter()
            .flat_map(|t| l.body.split(t).skip(1))
            .filter(|m| {
                m.strip_prefix("class=\"")
                    .and_then(|r| r.split('"').next())
                    .is_some_and(|c| !matches!(c, "chartbg" | "grid"))
            })
            .count();
        assert!(
            marks > 0,
            "{what}: lane {} is drawn with nothing in it",
            l.id
        );
    }

    // The time axis has a title and ticks, at the top and at the foot.
    for id in ["time-axis", "time-axis-foot"] {
        let axis = timeline
            .split(&format!("id=\"{id}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("{what}: no #{id}"));
        let axis = &axis[..axis.find("</g>").unwrap()];
        let t = texts(axis);
        assert!(
            t.iter()
                .any(|(tag, c)| tag.starts_with("class=\"axis-title\"") && c.contains("seconds")),
            "{what}: #{id} has no title"
        );
        assert!(
            t.iter().filter(|(_, c)| c.ends_with('s')).count() >= 2,
            "{what}: #{id} has no ticks"
        );
    }

    // The legend explains every glyph the picture draws.
    let legend = page
        .split("id=\"legend\">")
        .nth(1)
        .expect("a legend")
        .split("</p>")
        .next()
        .unwrap();
    let explained: BTreeSet<&str> = legend
        .split("data-glyph=\"")
        .skip(1)
        .filter_map(|r| r.split('"').next())
        .collect();
    let mut drawn = BTreeSet::new();
    for tag in ["<rect ", "<line ", "<circle ", "<path ", "<polyline "] {
        for part in timeline.split(tag).skip(1) {
            if let Some(v) = part
                .strip_prefix("class=\"")
                .and_then(|r| r.split('"').next())
            {
                drawn.extend(v.split_whitespace().filter(|c| !LAYOUT.contains(c)));
            }
        }
    }
    let missing: Vec<_> = drawn.difference(&explained).collect();
    assert!(
        missing.is_empty(),
        "{what}: the legend does not explain {missing:?} (it has {explained:?})"
    );

    // A text cut short ("tools/call get_curren…") carries its full text on hover.
    for (tag, content) in texts(page) {
        if shown(content).trim_end().ends_with('…') {
            assert!(
                content.contains("<title>"),
                "{what}: <text {tag}> is cut without its full text: {content:?}"
            );
        }
    }

    // Histogram labels do not run into each other: labels on one line stand at least their
    // widths apart, with a little air between.
    if page.contains("<svg id=\"distributions\"") {
        let dist = svg(page, "distributions");
        let mut by_line: std::collections::BTreeMap<String, Vec<(f64, f64, String)>> =
            Default::default();
        for (tag, content) in texts(dist) {
            if !tag.starts_with("class=\"tick") {
                continue;
            }
            let tag = format!(" {tag}");
            let x: f64 = attr(&tag, "x").unwrap().parse().unwrap();
            let y = attr(&tag, "y").unwrap().to_string();
            let label = shown(content);
            let w = label_w(&label);
            let (a, b) = match attr(&tag, "text-anchor").unwrap_or("start") {
                "middle" => (x - w / 2.0, x + w / 2.0),
                "end" => (x - w, x),
                _ => (x, x + w),
            };
            by_line.entry(y).or_default().push((a, b, label));
        }
        for (y, mut labels) in by_line {
            labels.sort_by(|p, q| p.0.total_cmp(&q.0));
            for w in labels.windows(2) {
                assert!(
                    w[0].1 + 3.0 <= w[1].0,
                    "{what}: histogram labels {:?} and {:?} overlap on the line at y={y}: {labels:?}",
                    w[0].2,
                    w[1].2
                );
            }
        }
    }
}

/// How wide a tick label draws at 10 px (DejaVu Sans, which system-ui falls back to on Linux):
/// digits and most letters 6.4 px, 'm' 9.7, 's' 5.2, '.' 3.2.
fn label_w(s: &str) -> f64 {
    s.chars()
        .map(|c| match c {
            'm' | 'w' => 9.7,
            's' => 5.2,
            '.' | ' ' => 3.2,
            _ => 6.4,
        })
        .sum()
}

fn lane_ids(page: &str) -> Vec<String> {
    lanes(svg(page, "timeline"))
        .iter()
        .map(|l| l.id.to_string())
        .collect()
}

#[test]
fn a_stdio_mcp_run_reads_whole_and_draws_no_http_lane() {
    let dir = tempdir("html-stdio");
    let page = load_html(
        &dir,
        &[
            "--mcp", "search", "--levels", "1,4", "--rounds", "2", "--settle", "100ms",
        ],
        &[mcp_server().to_str().unwrap(), "--lock", "50ms"],
    );
    assert_readable(&page, "stdio MCP run");
    let ids = lane_ids(&page);
    // Its lanes are the server's, its calls' and its samples', nothing of HTTP's.
    for id in &ids {
        assert!(
            [
                "server",
                "events",
                "levels",
                "concurrency-1",
                "concurrency-4",
                "throughput",
                "latency",
                "health",
                "server-rss",
                "server-cpu"
            ]
            .contains(&id.as_str()),
            "lane {id:?} in a stdio run: {ids:?}"
        );
    }
    for id in ["server", "concurrency-1", "concurrency-4", "throughput"] {
        assert!(ids.iter().any(|i| i == id), "no {id} lane: {ids:?}");
    }
    // Its names are short: the gutter has room for every one of them whole.
    let cut: Vec<_> = texts(svg(&page, "timeline"))
        .into_iter()
        .filter(|(_, c)| shown(c).ends_with('…'))
        .collect();
    assert!(cut.is_empty(), "cut where there is room: {cut:?}");
    assert!(!page.contains("phases (n="), "HTTP phases in a stdio run");
    assert!(
        !page.contains("connect floor"),
        "a TCP floor in a stdio run"
    );
}

#[test]
fn a_load_given_only_a_url_reads_whole() {
    // Only --url: the server is the test's (witness finds it by its port).
    let port = free_port();
    let _server =
        Bg::start(Command::new(toy()).args(["--port", &port.to_string(), "--call", "lock:10ms"]));
    wait_listening(port);
    let dir = tempdir("html-url");
    let page = load_html(
        &dir,
        &[
            "--url",
            &format!("http://127.0.0.1:{port}/call"),
            "--levels",
            "1,2",
            "--rounds",
            "3",
            "--settle",
            "100ms",
        ],
        &[],
    );
    assert_readable(&page, "--url only");
    let ids = lane_ids(&page);
    assert!(ids.iter().any(|i| i == "concurrency-2"), "{ids:?}");
}

/// The lanes the README's picture shows, as scripts/timeline-png.sh listed them.
fn pictured() -> Vec<String> {
    let path = repo().join("docs/timeline.lanes");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/timeline-png.sh writes it)",
                path.display()
            )
        })
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn the_demo_s_html_has_every_lane_the_readme_picture_shows_and_reads_whole() {
    let want = pictured();
    assert!(want.len() >= 5, "docs/timeline.lanes lists {want:?}");
    // scripts/demo.sh's load, with the debug binaries and a port of the test's own.
    let port = free_port().to_string();
    let dir = tempdir("html-demo");
    let page = load_html(
        &dir,
        &[
            "--url",
            &format!("http://127.0.0.1:{port}/call"),
            "--rounds",
            "1",
            "--restart",
            "always",
            "--backoff",
            "200ms",
        ],
        &[
            toy().to_str().unwrap(),
            "--port",
            &port,
            "--call",
            "lock:1s",
            "--watchdog",
            "6s",
        ],
    );
    let have = lane_ids(&page);
    let lost: Vec<_> = want.iter().filter(|l| !have.contains(l)).collect();
    assert!(
        lost.is_empty(),
        "the demo's HTML lost lanes the README's picture shows: {lost:?} (it has {have:?}); \
         regenerate the picture with scripts/timeline-png.sh if that is meant"
    );
    assert_readable(&page, "the demo");
}

#[test]
fn a_tool_name_is_whole_where_there_is_room_and_cut_with_its_full_text_on_hover_where_not() {
    // A real stdio session through wrap (the official Python SDK's client and server), its
    // journal's tools renamed as a user's server names them, re-rendered by `witness report`.
    if !have("the Python MCP SDK", "python3 -c 'import mcp'") {
        return;
    }
    let (_, journal, _) = sdk_session("html-names", 3, &[]);
    let (whole, long) = (
        "tools/call get_current_weather",
        "tools/call get_current_weather_for_the_city_whose_name_is_long",
    );
    let text = std::fs::read_to_string(&journal).expect("wrap's journal");
    assert!(text.contains("\"stdio tools/call echo\""), "{text}");
    let renamed = dir_file(&journal, "renamed.jsonl");
    std::fs::write(
        &renamed,
        text.replace("\"stdio tools/call echo\"", &format!("\"stdio {long}\""))
            .replace("\"stdio tools/list\"", &format!("\"stdio {whole}\"")),
    )
    .unwrap();
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(&renamed)
            .args(["--format", "html"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let page = String::from_utf8_lossy(&out.stdout).into_owned();
    let timeline = svg(&page, "timeline");
    assert!(
        timeline.contains(&format!(">{whole}</text>")),
        "a 30-character tool name is cut though the gutter has room for it"
    );
    assert!(
        timeline.contains(&format!("<title>{long}</title>")),
        "the long name, cut, has no full text on hover"
    );
    assert_readable(&page, "renamed tools");
}

fn dir_file(beside: &Path, name: &str) -> PathBuf {
    beside.parent().unwrap().join(name)
}

#[test]
fn a_wrap_with_no_traffic_draws_only_the_server_s_lanes() {
    // No requests, no levels, no probes: no lane for any of them, and no axis without data.
    let dir = tempdir("html-quiet");
    let html = dir.join("t.html");
    let out = run_bounded(
        Command::new(witness())
            .arg("wrap")
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--html")
            .arg(&html)
            .args(["--", "sleep", "0.5"])
            .stdin(std::process::Stdio::null()),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let page = std::fs::read_to_string(&html).expect("the HTML timeline");
    assert_readable(&page, "a quiet wrap");
    let ids = lane_ids(&page);
    assert!(ids.iter().any(|i| i == "server"), "{ids:?}");
    for id in &ids {
        assert!(
            ["server", "events", "server-rss", "server-cpu"].contains(&id.as_str()),
            "lane {id:?} in a run with no traffic: {ids:?}"
        );
    }
}
