//! The documentation is tested: every `witness …` command in a fenced block of README.md and
//! docs/*.md is parsed by the real command line (the library's `Cli::parse_args`, the binary's own
//! parser), so a renamed or removed flag fails here; and every block not marked
//! `<!-- not run: REASON -->` is run for real, in a scratch folder, against the bundled toy server,
//! its shown output lines checked against what witness printed.
//!
//! How a block is run:
//! - `<!-- run with: toy_server --port 8080 -->` just before a block starts that server first (from
//!   the build's own binaries) and stops it after the block;
//! - ports 8080 and 8000 in a command (and in that server line) become a free port; the commands
//!   and the server run in a scratch folder holding `examples/` and an `index.html`;
//! - a `load` without `--duration`/`--rounds` runs each level for 300ms, a `load` without `--settle`
//!   settles 100ms, a `soak` without `--duration` runs 3s: the documented defaults are kept in
//!   shape, bounded in time;
//! - output is `$ witness …` followed by the lines it prints; a shown line matches a printed line
//!   word for word, a word with a digit in it standing for any word with a digit (timings vary), and
//!   `…` for the rest of the line;
//! - the exit code must be 0 or 1 (a verdict), or the one an `<!-- exit N -->` before the block names.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// One documented command: where it is, its words, and the output lines shown under it.
#[derive(Debug, Clone)]
struct Doc {
    at: String,
    args: Vec<String>,
    /// `< FILE`: the command's stdin (a client's messages for `wrap`).
    stdin: Option<String>,
    shown: Vec<String>,
}

/// One fenced block with its commands and what the comment before it says.
#[derive(Debug)]
struct Block {
    at: String,
    not_run: Option<String>,
    server: Option<String>,
    exit: Option<i32>,
    commands: Vec<Doc>,
}

/// A command line's words as a shell would split them, up to a comment, a pipe or a redirection.
fn words(line: &str) -> Vec<String> {
    let mut cut = line.len();
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => {
                cut = i;
                break;
            }
            _ => {}
        }
        prev = c;
    }
    let all = shlex::split(&line[..cut]).unwrap_or_else(|| panic!("unbalanced quotes: {line}"));
    all.into_iter()
        .take_while(|w| {
            !(w.starts_with('>')
                || w.starts_with('<')
                || w.starts_with('|')
                || w.starts_with("2>")
                || w == "&&")
        })
        .collect()
}

fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).unwrap();
    let name = file.strip_prefix(repo()).unwrap().display().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("```") {
            i += 1;
            continue;
        }
        let start = i;
        // The comments just before the fence (blank lines between are allowed).
        let mut notes = Vec::new();
        let mut j = start;
        while j > 0 {
            j -= 1;
            let l = lines[j].trim();
            if l.is_empty() {
                continue;
            }
            if l.starts_with("<!--") && l.ends_with("-->") {
                notes.push(l.trim_start_matches("<!--").trim_end_matches("-->").trim());
                continue;
            }
            break;
        }
        let note = |key: &str| {
            notes
                .iter()
                .find_map(|n| n.strip_prefix(key).map(|v| v.trim().to_string()))
        };
        i += 1;
        let mut body = Vec::new();
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push((i + 1, lines[i]));
            i += 1;
        }
        i += 1;
        // Lines ending in `\` continue on the next.
        let mut joined: Vec<(usize, String)> = Vec::new();
        let mut carry: Option<(usize, String)> = None;
        for (n, l) in body {
            let (n0, mut acc) = carry.take().unwrap_or((n, String::new()));
            acc.push_str(l.trim_end_matches('\\'));
            if l.ends_with('\\') {
                acc.push(' ');
                carry = Some((n0, acc));
            } else {
                joined.push((n0, acc));
            }
        }
        let prompt = joined.iter().any(|(_, l)| l.starts_with("$ "));
        let mut commands: Vec<Doc> = Vec::new();
        let mut in_output = false;
        for (n, l) in joined {
            let cmd = if prompt {
                l.strip_prefix("$ ")
            } else {
                Some(l.as_str())
            };
            match cmd {
                Some(c) if c.trim_start().starts_with("witness ") => {
                    commands.push(Doc {
                        at: format!("{name}:{n}"),
                        args: words(c.trim_start()),
                        // A `<` outside quotes (a threshold's `'p95 < 300ms'` is an argument).
                        stdin: shlex::split(c).and_then(|w| {
                            let at = w.iter().position(|x| x == "<")?;
                            w.get(at + 1).cloned()
                        }),
                        shown: Vec::new(),
                    });
                    in_output = prompt;
                }
                Some(_) if prompt => in_output = false,
                Some(_) => {}
                None if in_output && !l.trim().is_empty() => {
                    commands.last_mut().unwrap().shown.push(l.clone());
                }
                None => {}
            }
        }
        out.push(Block {
            at: format!("{name}:{}", start + 1),
            not_run: note("not run:"),
            server: note("run with:"),
            exit: note("exit").map(|e| e.parse().expect("<!-- exit N -->")),
            commands,
        });
    }
    out
}

fn all_blocks() -> Vec<Block> {
    doc_files().iter().flat_map(|f| blocks(f)).collect()
}

#[test]
fn every_documented_command_is_one_the_command_line_takes() {
    let blocks = all_blocks();
    let docs: Vec<&Doc> = blocks.iter().flat_map(|b| &b.commands).collect();
    assert!(
        docs.len() >= 20,
        "only {} commands found in the docs: is the extraction broken?",
        docs.len()
    );
    let mut bad = Vec::new();
    for d in &docs {
        if let Err(e) = witness::cli::Cli::parse_args(&d.args) {
            bad.push(format!("{}: `{}`:\n{e}", d.at, d.args.join(" ")));
        }
    }
    assert!(
        bad.is_empty(),
        "documented commands witness refuses:\n{}",
        bad.join("\n")
    );
}

#[test]
fn a_block_is_run_unless_it_says_why_not() {
    for b in all_blocks() {
        if let Some(why) = &b.not_run {
            assert!(
                why.len() >= 8,
                "{}: `not run:` needs a reason a reader understands, got {why:?}",
                b.at
            );
            assert!(
                !b.commands.is_empty(),
                "{}: marked not run but holds no witness command",
                b.at
            );
        }
    }
}

/// A shown output line matches a printed one word for word; a word with a digit stands for any word
/// with a digit, `…` for the rest of the line.
fn line_matches(shown: &str, printed: &str) -> bool {
    let s: Vec<&str> = shown.split_whitespace().collect();
    let p: Vec<&str> = printed.split_whitespace().collect();
    let digit = |w: &str| w.chars().any(|c| c.is_ascii_digit());
    for (k, w) in s.iter().enumerate() {
        if *w == "…" {
            return true;
        }
        let Some(q) = p.get(k) else { return false };
        let same = if digit(w) { digit(q) } else { w == q };
        if !same {
            return false;
        }
    }
    s.len() == p.len()
}

fn free_port() -> u16 {
    common::free_port()
}

/// The documented defaults, bounded in time for a test.
fn bounded(args: &[String]) -> Vec<String> {
    let has = |f: &str| {
        args.iter()
            .any(|a| a == f || a.starts_with(&format!("{f}=")))
    };
    let mut extra: Vec<&str> = Vec::new();
    match args.get(1).map(String::as_str) {
        Some("load") => {
            if !has("--duration") && !has("--rounds") {
                extra.extend(["--duration", "300ms"]);
            }
            if !has("--settle") {
                extra.extend(["--settle", "100ms"]);
            }
        }
        Some("soak") if !has("--duration") => extra.extend(["--duration", "3s"]),
        _ => {}
    }
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut out = args[..at].to_vec();
    out.extend(extra.iter().map(|s| s.to_string()));
    out.extend_from_slice(&args[at..]);
    out
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the docs' server never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scratch folder for one doc file's commands: `examples/`, an `index.html` to serve, and a state
/// folder (witness's journals), seeded from `seed`'s when given.
fn scratch(tag: &str, seed: Option<&Path>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("witness-docs-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(repo().join("examples"), dir.join("examples")).unwrap();
    std::fs::write(dir.join("index.html"), "<p>hello from a file</p>\n").unwrap();
    match seed {
        Some(from) => {
            let ok = Command::new("cp")
                .arg("-r")
                .arg(from.join("state"))
                .arg(dir.join("state"))
                .status()
                .unwrap();
            assert!(ok.success());
        }
        None => std::fs::create_dir_all(dir.join("state")).unwrap(),
    }
    dir
}

/// Runs one file's blocks in order in `dir`; returns how many commands ran and what failed.
fn run_blocks(blocks: &[Block], dir: &Path) -> (usize, Vec<String>) {
    let witness = PathBuf::from(env!("CARGO_BIN_EXE_witness"));
    // The example servers are built beside witness (toy_server is named so the build has it).
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_toy_server"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    let mut failures = Vec::new();
    for b in blocks {
        if b.not_run.is_some() || b.commands.is_empty() {
            continue;
        }
        let port = free_port().to_string();
        let mut server = b.server.as_ref().map(|line| {
            let w = words(&line.replace("8080", &port).replace("8000", &port));
            // The build's own example servers, else a program on PATH (python3 -m http.server),
            // run in the scratch folder, which holds an index.html to serve.
            let program = match bin_dir.join(&w[0]) {
                p if p.exists() => p,
                _ => PathBuf::from(&w[0]),
            };
            let child = Command::new(program)
                .args(&w[1..])
                .current_dir(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{}: run with {line}: {e}", b.at));
            wait_listening(port.parse().unwrap());
            child
        });
        for d in &b.commands {
            let args: Vec<String> = bounded(&d.args)
                .iter()
                .map(|a| a.replace("8080", &port).replace("8000", &port))
                .collect();
            let child = Command::new(&witness)
                .args(&args[1..])
                .current_dir(dir)
                .env("PATH", &path)
                .env("XDG_STATE_HOME", dir.join("state"))
                .stdin(match &d.stdin {
                    Some(f) => Stdio::from(std::fs::File::open(dir.join(f)).unwrap()),
                    None => Stdio::null(),
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let pid = child.id();
            let waiter = std::thread::spawn(move || {
                if rx.recv_timeout(Duration::from_secs(90)).is_err() {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
            });
            let out = child.wait_with_output().unwrap();
            let _ = tx.send(());
            waiter.join().unwrap();
            ran += 1;
            let printed = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let code = out.status.code().unwrap_or(-1);
            let code_ok = match b.exit {
                Some(want) => code == want,
                None => code == 0 || code == 1,
            };
            let mut missing: Vec<&String> = Vec::new();
            for s in &d.shown {
                if !printed.lines().any(|p| line_matches(s, p)) {
                    missing.push(s);
                }
            }
            if !code_ok || printed.contains("panicked") || !missing.is_empty() {
                failures.push(format!(
                    "{}: `{}` exited {code}; shown lines not printed: {missing:#?}\n--- printed:\n{printed}",
                    d.at,
                    args.join(" ")
                ));
            }
        }
        if let Some(s) = server.as_mut() {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
    (ran, failures)
}

#[test]
fn the_documented_commands_run_and_print_what_the_docs_show() {
    // The README first (its runs are the past runs the guide's `witness report` commands read),
    // then each guide page at once, each in its own folder with a copy of the README's runs.
    let files = doc_files();
    let readme = scratch("README", None);
    let (mut ran, mut failures) = run_blocks(&blocks(&files[0]), &readme);
    let pages: Vec<_> = files[1..]
        .iter()
        .map(|f| {
            let tag = f.file_stem().unwrap().to_string_lossy().to_string();
            let dir = scratch(&format!("docs-{tag}"), Some(&readme));
            let f = f.clone();
            std::thread::spawn(move || {
                let r = run_blocks(&blocks(&f), &dir);
                let _ = std::fs::remove_dir_all(&dir);
                r
            })
        })
        .collect();
    for p in pages {
        let (n, f) = p.join().unwrap();
        ran += n;
        failures.extend(f);
    }
    let _ = std::fs::remove_dir_all(&readme);
    assert!(ran >= 15, "only {ran} documented commands were run");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_matcher_reads_digits_as_any_figure_and_words_exactly() {
    assert!(line_matches(
        "   1   4295       0      0        0     0.03s   0.001s   0.005s              -  200          no         PASS",
        "   1   2765       0      0        0     0.01s   0.000s   0.001s              -  200          no         PASS"
    ));
    assert!(!line_matches("   1   4295   PASS", "   1   4295   FAIL"));
    assert!(!line_matches("verdict: PASS", "verdict: PASS and more"));
    assert!(line_matches("verdict: PASS …", "verdict: PASS and more"));
    assert_eq!(
        words("witness report --list        # the recent runs"),
        ["witness", "report", "--list"]
    );
    assert_eq!(
        words("witness completions bash > ~/.local/share/x"),
        ["witness", "completions", "bash"]
    );
    assert_eq!(
        words("witness load --mcp sleep --args '{\"ms\": 5}' -- a b"),
        [
            "witness",
            "load",
            "--mcp",
            "sleep",
            "--args",
            "{\"ms\": 5}",
            "--",
            "a",
            "b"
        ]
    );
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_witness"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The headings of a help text, in order, and the long options under each.
fn headings(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for l in text.lines() {
        if !l.starts_with(' ') && l.ends_with(':') {
            out.push((l.trim_end_matches(':').to_string(), Vec::new()));
        } else if let (Some(last), Some(flag)) = (
            out.last_mut(),
            l.trim_start()
                .split([' ', ','])
                .find(|w| w.starts_with("--")),
        ) {
            if l.starts_with("  ") && l.trim_start().starts_with('-') {
                last.1.push(flag.to_string());
            }
        }
    }
    out
}

#[test]
fn load_and_wrap_help_put_each_option_under_its_heading() {
    let load = headings(&help(&["load", "--help"]));
    let names: Vec<&str> = load.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        names,
        [
            "Options",
            "Target and request",
            "MCP",
            "Health and readiness",
            "Load shape",
            "Verdict rules",
            "Refusals and safety",
            "Resources (sampling)",
            "The server's command (supervision)",
            "Container target (Docker)",
            "Output files",
            "TLS",
            "HTTP protocol",
            "Words",
        ],
        "{load:#?}"
    );
    let under = |h: &str| &load.iter().find(|(n, _)| n == h).unwrap().1;
    let container = under("Container target (Docker)");
    for f in [
        "--journal",
        "--report",
        "--html",
        "--trace",
        "--cacert",
        "--insecure",
        "--gpu",
        "--http2",
        "--connections",
    ] {
        assert!(
            !container.contains(&f.to_string()),
            "{f} under Container: {container:?}"
        );
    }
    assert!(container.contains(&"--image".to_string()), "{container:?}");
    assert_eq!(
        under("Output files"),
        &[
            "--journal",
            "--report",
            "--html",
            "--trace",
            "--junit",
            "--name"
        ]
    );
    assert_eq!(under("TLS"), &["--cacert", "--insecure"]);
    assert!(under("Load shape").contains(&"--levels".to_string()));
    assert!(under("Load shape").contains(&"--rates".to_string()));
    assert!(under("MCP").contains(&"--mcp".to_string()));
    // Defaults are shown.
    let text = help(&["load", "--help"]);
    for d in [
        "[default: 1,4,8]",
        "[default: 30s]",
        "[default: 2s]",
        "[default: 100ms]",
    ] {
        assert!(text.contains(d), "load --help lacks {d}");
    }

    let wrap = headings(&help(&["wrap", "--help"]));
    let names: Vec<&str> = wrap.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        names,
        [
            "Options",
            "The server's command (supervision)",
            // wrap's own business, right after the server: its clients and their recording.
            "Client traffic (MCP stdio relay, HTTP proxy)",
            "Recording the session",
            "Container target (Docker)",
            "Output files",
            "TLS",
            "Resources (sampling)",
        ],
        "{wrap:#?}"
    );
    let under = |h: &str| &wrap.iter().find(|(n, _)| n == h).unwrap().1;
    assert_eq!(
        under("Client traffic (MCP stdio relay, HTTP proxy)"),
        &["--stdin", "--proxy"]
    );
    assert!(!under("Container target (Docker)").contains(&"--stdin".to_string()));
    assert_eq!(
        under("Recording the session"),
        &[
            "--record",
            "--record-max",
            "--record-body-max",
            "--record-mask-key"
        ]
    );

    // replay's ~30 flags under headings of their own, its speeds first; none left in "Options".
    let replay = headings(&help(&["replay", "--help"]));
    let names: Vec<&str> = replay.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        names[..3],
        ["Arguments", "Options", "The recording's speeds"],
        "{replay:#?}"
    );
    let under = |h: &str| &replay.iter().find(|(n, _)| n == h).unwrap().1;
    assert_eq!(under("Options"), &["--help"], "{replay:#?}");
    for f in ["--speeds", "--find-limit", "--sessions", "--compare"] {
        assert!(
            under("The recording's speeds").contains(&f.to_string()),
            "{f}"
        );
    }
    assert!(under("Verdict rules").contains(&"--factor".to_string()));
}

/// The glossary's words, defined once in the guide and once in `load --help`.
const WORDS: [&str; 6] = [
    "concurrency ladder",
    "cliff",
    "identity",
    "settle",
    "connect floor",
    "held",
];

#[test]
fn the_guide_and_load_help_define_the_same_words() {
    let guide = std::fs::read_to_string(repo().join("docs/README.md")).unwrap();
    let glossary = &guide[guide
        .find("## Words")
        .expect("a glossary in docs/README.md")..];
    let text = help(&["load", "--help"]);
    let words_help = &text[text.find("Words:").expect("Words: in load --help")..];
    for w in WORDS {
        assert!(
            glossary.contains(&format!("**{w}**")),
            "docs/README.md's glossary does not define {w:?}"
        );
        assert!(
            words_help.lines().any(|l| l.trim_start().starts_with(w)),
            "load --help's words do not define {w:?}"
        );
    }
    // The cliff is what the rule fails: worse than a queue, never a queue itself (a server that
    // serves one request at a time passes by design).
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    for (what, text) in [
        ("docs/README.md", flat(glossary)),
        ("load --help", flat(words_help)),
    ] {
        assert!(text.contains("worse than a queue"), "{what}: {text}");
        assert!(!text.contains("queued behind each other instead"), "{what}");
    }
}

#[test]
fn completions_and_the_man_page_come_from_the_same_definitions() {
    let bash = help(&["completions", "bash"]);
    assert!(
        bash.contains("--url") && bash.contains("--max-connect-floor"),
        "{bash}"
    );
    let zsh = help(&["completions", "zsh"]);
    assert!(zsh.contains("--levels"));
    let man = help(&["man"]);
    assert!(man.contains(".TH witness 1"), "{man}");
    let load = help(&["man", "load"]);
    assert!(load.contains(".TH witness-load 1") && load.contains("max\\-connect\\-floor"));
    // Where man is installed, the page is one it reads.
    if Command::new("man").arg("--version").output().is_ok() {
        let out = Command::new("sh")
            .args(["-c", "\"$0\" man load | MANWIDTH=100 man -l - 2>&1"])
            .arg(env!("CARGO_BIN_EXE_witness"))
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && text.contains("LOAD SHAPE")
                && text.contains("--max-connect-floor"),
            "man -l could not read witness man load: {text}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_witness"))
        .args(["man", "lod"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give one of wrap, load"));
}

#[test]
fn the_readme_is_a_front_door_and_figures_come_from_the_script() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n <= 250,
        "README.md is {n} lines; the reference belongs in docs/"
    );
    for link in [
        "docs/README.md",
        "docs/timeline.png",
        "scripts/test.sh",
        "scripts/demo.sh",
    ] {
        assert!(readme.contains(link), "README.md does not mention {link}");
    }
    // Every relative link resolves.
    let mut dead = Vec::new();
    for f in doc_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("](") {
            let target: String = text[i + 2..]
                .chars()
                .take_while(|c| !matches!(c, ')' | '#' | ' '))
                .collect();
            if target.is_empty() || target.contains("://") {
                continue;
            }
            if !f.parent().unwrap().join(&target).exists() {
                dead.push(format!("{}: {target}", f.display()));
            }
        }
    }
    assert!(dead.is_empty(), "links to nothing: {dead:#?}");
    // Every guide page is linked from the guide's index.
    let index = std::fs::read_to_string(repo().join("docs/README.md")).unwrap();
    for f in doc_files() {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if f.parent().unwrap().ends_with("docs") && name != "README.md" {
            assert!(
                index.contains(&format!("({name})")),
                "docs/README.md does not link {name}"
            );
        }
    }
    // The binary's size is written by scripts/figures.sh between markers, never by hand.
    let mut marked = 0;
    for f in doc_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("<!-- figures:") {
            let rest = &text[i..];
            assert!(
                rest.contains("<!-- /figures -->"),
                "{}: a figures marker is not closed",
                f.display()
            );
            marked += 1;
        }
        if text.contains("<!-- figures:") {
            assert!(
                text.contains("scripts/figures.sh"),
                "{}: figures without naming the script that writes them",
                f.display()
            );
        }
    }
    assert!(marked >= 1, "no figures markers in the docs");
    let script = std::fs::read_to_string(repo().join("scripts/figures.sh")).unwrap();
    assert!(
        script.contains("write binary-size"),
        "scripts/figures.sh no longer writes the binary's size"
    );
    // The toolchain the README asks for is the one Cargo.toml requires.
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let rv = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .unwrap()
        .trim_end_matches('"');
    assert!(
        readme.contains(&format!("Rust {rv}")),
        "README.md does not ask for Rust {rv}"
    );
}

#[test]
fn no_file_in_the_repository_names_a_path_outside_it() {
    let needles = [concat!("../", "shared"), concat!("/wo", "rk/")];
    let out = Command::new("git")
        .args(["ls-files", "-co", "--exclude-standard"])
        .current_dir(repo())
        .output()
        .unwrap();
    let mut hits = Vec::new();
    for f in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(text) = std::fs::read_to_string(repo().join(f)) else {
            continue;
        };
        for (n, l) in text.lines().enumerate() {
            if needles.iter().any(|x| l.contains(x)) {
                hits.push(format!("{f}:{}: {l}", n + 1));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "paths outside the repository:\n{}",
        hits.join("\n")
    );
}

/// The repository stands alone: no file in it names the folder beside it where the project's
/// design notes were kept (a comment in src/journal.rs once did).
#[test]
fn no_file_names_a_path_outside_the_repository() {
    let beside = format!("{}/{}", "..", "shared");
    let design = format!("{}/{}", "shared", "DESIGN.md");
    let mut bad = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = ["src", "tests", "docs", "scripts", "examples", ".ci"]
        .iter()
        .map(|d| repo().join(d))
        .chain([repo().join("README.md"), repo().join("Cargo.toml")])
        .collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else if let Ok(text) = std::fs::read_to_string(&p) {
            if text.contains(&beside) || text.contains(&design) {
                bad.push(p.display().to_string());
            }
        }
    }
    assert!(
        bad.is_empty(),
        "these name a path outside the repository: {bad:?}"
    );
    // Nor does the README run a tool nothing installs (uv's `uvx`).
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(!readme.contains("uvx"), "README.md runs uvx");
}

/// docs/ci.md's workflow is run as written: its `target/release/witness` commands (continuation
/// lines joined), with the build's own binaries for `target/release/`, a free port for 8080,
/// `--duration 1s` for 10s and `main` for the branch's name; `gh run download` (the network) is
/// stood in for by a first run of the load step whose journal becomes `main/load.jsonl`. Each
/// command exits 0 or 1 (a verdict) and writes the files the workflow keeps.
#[test]
fn the_ci_workflow_s_commands_run_as_written() {
    let text = std::fs::read_to_string(repo().join("docs/ci.md")).unwrap();
    let yaml = text
        .split("```yaml")
        .nth(1)
        .and_then(|t| t.split("```").next())
        .expect("docs/ci.md has a yaml workflow");
    let mut commands: Vec<String> = Vec::new();
    let mut carry = String::new();
    for l in yaml.lines() {
        let t = l.trim().trim_start_matches("- run: |").trim();
        if carry.is_empty() && !t.starts_with("target/release/witness ") {
            continue;
        }
        carry.push_str(t.trim_end_matches('\\'));
        carry.push(' ');
        if !t.ends_with('\\') {
            commands.push(std::mem::take(&mut carry));
        }
    }
    assert_eq!(
        commands.len(),
        2,
        "a load step and a compare step: {commands:?}"
    );
    assert!(commands[0].contains(" load ") && commands[1].contains(" compare "));
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_toy_server"))
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = scratch("ci-workflow", None);
    let port = free_port().to_string();
    let run = |line: &str| -> std::process::Output {
        let line = line
            .replace("target/release/", &format!("{}/", bin_dir.display()))
            .replace("8080", &port)
            .replace("--duration 10s", "--duration 1s")
            .replace("${{ github.ref_name }}", "main");
        let w = words(&line);
        let out = common::run_bounded(
            Command::new(&w[0])
                .args(&w[1..])
                .current_dir(&dir)
                .env("XDG_STATE_HOME", dir.join("state")),
            Duration::from_secs(120),
        );
        let code = out.status.code();
        assert!(
            matches!(code, Some(0 | 1)),
            "`{line}` exited {code:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
        out
    };
    // The main branch's run, as `gh run download` would bring it.
    run(&commands[0]);
    std::fs::create_dir_all(dir.join("main")).unwrap();
    std::fs::rename(dir.join("load.jsonl"), dir.join("main/load.jsonl")).unwrap();
    // This push's run, then the comparison.
    run(&commands[0]);
    for f in ["load.jsonl", "load.xml", "load.html"] {
        assert!(dir.join(f).is_file(), "the load step wrote no {f}");
    }
    run(&commands[1]);
    let page = std::fs::read_to_string(dir.join("compare.html")).unwrap();
    assert!(page.contains("witness compare"), "{page}");
    let xml = std::fs::read_to_string(dir.join("compare.xml")).unwrap();
    assert!(xml.contains("level 8 p95"), "{xml}");
    assert!(xml.contains("assert new_timers == 0"), "{xml}");
}
