//! The seed's pillars, each guarded at the integration level: a test here goes red when the one-line
//! break named beside it in docs/reliability.md ("Pillars of the seed") is made to the product.
//! These were found by a mutation audit: each of them was green under its break before.

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `witness load --url http://127.0.0.1:PORT/call ARGS -- toy_server --port PORT SERVER…`
fn load_toy(port: u16, args: &[&str], server: &[&str]) -> Command {
    let mut c = Command::new(witness());
    c.args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
        .args(args)
        .arg("--")
        .arg(toy())
        .args(["--port", &port.to_string()])
        .args(server);
    c
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn levels(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["levels"].as_array().expect("levels").clone()
}

// ---- health after a level ------------------------------------------------------------------------

/// The after-level probe is the verdict's: a server whose /health goes bad during level 2 fails
/// level 2 with "health after: 500", and the run exits 1.
#[test]
fn a_level_after_which_health_fails_is_failed_and_the_run_exits_1() {
    let dir = tempdir("pillar-health-after");
    let (j, r) = (dir.join("j.jsonl"), dir.join("r.json"));
    let port = free_port();
    let out = run_bounded(
        &mut load_toy(
            port,
            &[
                "--levels",
                "1,2",
                "--rounds",
                "5",
                "--journal",
                p(&j),
                "--report",
                p(&r),
            ],
            // Level 1 answers 5 calls, level 2 ten more: /health is 500 from the 10th on.
            &["--health-fail-after", "10"],
        ),
        Duration::from_secs(90),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = json(&r);
    let l = levels(&report);
    assert_eq!(l.len(), 2, "{report:#}");
    assert_eq!(l[0]["verdict"], "pass", "{:#}", l[0]);
    assert_eq!(l[0]["health_after"], 200, "{:#}", l[0]);
    assert_eq!(l[1]["counts"]["ok"], 10, "every request ok: {:#}", l[1]);
    assert_eq!(l[1]["health_after"], 500, "{:#}", l[1]);
    assert_eq!(l[1]["verdict"], "fail", "{:#}", l[1]);
    assert!(
        l[1]["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("health after: 500")),
        "{:#}",
        l[1]
    );
    assert_eq!(report["verdict"], "fail", "{report:#}");
}

/// The before-level probe is the ladder's: once /health says 500 (after level 1's 5 calls), level 2
/// is not measured against a wedged server: no request of it is sent.
#[test]
fn a_level_whose_health_before_fails_sends_no_request() {
    let dir = tempdir("pillar-health-before");
    let (j, r) = (dir.join("j.jsonl"), dir.join("r.json"));
    let port = free_port();
    let out = run_bounded(
        &mut load_toy(
            port,
            &[
                "--levels",
                "1,2",
                "--rounds",
                "5",
                "--journal",
                p(&j),
                "--report",
                p(&r),
            ],
            &["--health-fail-after", "5"],
        ),
        Duration::from_secs(90),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let l = levels(&json(&r));
    assert_eq!(l[0]["counts"]["ok"], 5, "{:#}", l[0]);
    assert_eq!(l[0]["health_after"], 500, "{:#}", l[0]);
    let sent = journal_lines(&j)
        .iter()
        .filter(|e| e["kind"] == "request" && e["group"] == "level1")
        .count();
    assert_eq!(sent, 0, "level 2 was measured against an unhealthy server");
    assert_ne!(l[1]["verdict"], "pass", "{:#}", l[1]);
}

// ---- identity: pid and start time ----------------------------------------------------------------

/// A listener with the same pid and a new start time is a new process (the pid was reused): the level
/// it happened in restarted. The journal is a real run's, with level 1's `level_end` identity given
/// the same pid and another start time.
#[test]
fn the_same_pid_with_a_new_start_time_is_a_restart() {
    let dir = tempdir("pillar-identity");
    let (j, r) = (dir.join("j.jsonl"), dir.join("r.json"));
    let port = free_port();
    let out = run_bounded(
        &mut load_toy(
            port,
            &["--levels", "1,2", "--rounds", "3", "--journal", p(&j)],
            &[],
        ),
        Duration::from_secs(90),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Level 1's end: the same pid, started later (as a reused pid is).
    let text = std::fs::read_to_string(&j).unwrap();
    let mut edited = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let Ok(mut v) = serde_json::from_str::<serde_json::Value>(line) else {
                return line.to_string();
            };
            let is_end = v["kind"] == "level_end" || v["event"]["kind"] == "level_end";
            let ev = if v["kind"] == "level_end" {
                &mut v
            } else {
                &mut v["event"]
            };
            if is_end && ev["index"] == 1 && ev["identity"]["pid"].is_u64() {
                let st = ev["identity"]["start_time"].as_u64().unwrap();
                ev["identity"]["start_time"] = (st + 7).into();
                edited += 1;
                return v.to_string();
            }
            line.to_string()
        })
        .collect();
    assert_eq!(edited, 1, "level 1's level_end with an identity:\n{text}");
    let reused = dir.join("reused.jsonl");
    std::fs::write(&reused, lines.join("\n") + "\n").unwrap();
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(&reused)
            .args(["--format", "json", "-o", p(&r)]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let l = levels(&json(&r));
    let before = &l[1]["identity_before"];
    let after = &l[1]["identity_after"];
    assert_eq!(before["pid"], after["pid"], "{:#}", l[1]);
    assert_ne!(before["start_time"], after["start_time"], "{:#}", l[1]);
    assert_eq!(l[1]["restarted"], true, "{:#}", l[1]);
    assert_eq!(l[1]["verdict"], "fail", "{:#}", l[1]);
    // Level 0 is untouched: the same identity, not restarted.
    assert_eq!(l[0]["restarted"], false, "{:#}", l[0]);
}

// ---- the journal flushed per lifecycle event -----------------------------------------------------

/// The pids of the processes whose command line is exactly `argv`.
fn pids_running(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// kill -9 of `witness wrap -- sleep …` 20 ms after its child appears: the spawn is on disk, as every
/// lifecycle event is flushed when written (not at the next 50 ms background flush). Ten tries.
#[test]
fn kill_9_of_wrap_just_after_its_child_starts_finds_the_spawn_on_disk() {
    let dir = tempdir("pillar-flush");
    let mut on_disk = 0;
    const TRIES: usize = 10;
    for i in 0..TRIES {
        let j = dir.join(format!("j{i}.jsonl"));
        // A duration no other process runs with, to find the child by its command line.
        let secs = format!("30.{}{i}", std::process::id());
        let child = Command::new(witness())
            .args(["wrap", "--journal", p(&j), "--", "sleep", &secs])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let guard = KillTree::new(child.id() as i32);
        let mut sleeper = Vec::new();
        wait_until("the child to start", Duration::from_secs(10), || {
            sleeper = pids_running(&["sleep", &secs]);
            !sleeper.is_empty()
        });
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            std::thread::yield_now();
        }
        kill(child.id() as i32, 9);
        let _ = wait_bounded(child, Duration::from_secs(10));
        drop(guard);
        let text = std::fs::read_to_string(&j).unwrap_or_default();
        let spawned = text
            .lines()
            .filter_map(journal_value)
            .any(|l| l["kind"] == "spawn" && l["pid"] == sleeper[0]);
        on_disk += usize::from(spawned);
        // witness's watchdog ends the child with it.
        wait_until(
            "the child to die with witness",
            Duration::from_secs(10),
            || !alive(sleeper[0]),
        );
    }
    // As built: 10 of 10. Without the flush per lifecycle event: 0 of 10 (nothing flushes a journal
    // that holds lifecycle lines only). A very busy machine may delay witness's spawn event past 20 ms
    // once or twice.
    assert!(
        on_disk >= TRIES - 2,
        "the spawn event was on disk in {on_disk} of {TRIES} kill -9s"
    );
}

// ---- the relay's client→server bytes ------------------------------------------------------------

/// A client's large burst into a server that reads slowly, with witness stopped and continued
/// (SIGSTOP, SIGCONT) again and again meanwhile: each stop interrupts a write blocked on the full
/// pipe, which then returns short. Every byte still reaches the server, in order.
#[test]
fn a_burst_into_a_slow_server_reaches_it_whole_though_witness_s_writes_are_cut_short() {
    if !have("python3", "python3 -c 'import hashlib'") {
        return;
    }
    let dir = tempdir("pillar-relay-short");
    let (j, got) = (dir.join("j.jsonl"), dir.join("got.txt"));
    // Reads 4 KiB at a time with a pause: witness's 64 KiB writes wait on a full pipe.
    let slow = "import hashlib, os, sys, time\n\
                h, n = hashlib.sha256(), 0\n\
                while True:\n\
                \x20   b = os.read(0, 4096)\n\
                \x20   if not b: break\n\
                \x20   h.update(b); n += len(b)\n\
                \x20   time.sleep(0.0005)\n\
                open(sys.argv[1], 'w').write(f'{n} {h.hexdigest()}')\n";
    let mut child = Command::new(witness())
        .args(["wrap", "--stdin", "relay", "--journal", p(&j)])
        .args(["--", "python3", "-c", slow, p(&got)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let _guard = KillTree::new(pid);
    let _deadline = kill_after(pid, Duration::from_secs(120));
    const SENT: usize = 4 << 20;
    let data: Vec<u8> = (0..SENT).map(|i| (i % 251) as u8).collect();
    let want = {
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(&data);
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        format!("{SENT} {hex}")
    };
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let r = stdin.write_all(&data);
        drop(stdin);
        r
    });
    // Stop and continue witness while the burst passes.
    let mut stops = 0;
    while !writer.is_finished() && stops < 2000 {
        kill(pid, libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(1));
        kill(pid, libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(2));
        stops += 1;
    }
    kill(pid, libc::SIGCONT);
    writer
        .join()
        .unwrap()
        .expect("witness read the whole burst");
    let out = wait_bounded(child, Duration::from_secs(120));
    let err = stderr(&out);
    eprintln!("{stops} stops of witness while the burst passed");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let read = std::fs::read_to_string(&got).unwrap();
    assert_eq!(read, want, "the server did not read what the client wrote");
}

// ---- the cliff factor ----------------------------------------------------------------------------

/// Every request ok, health fine, no restart, and yet level 2's slowest ok request (one call stalled
/// 3 s) is far past 2 × level 1's slowest × the factor: the level fails for the cliff alone.
#[test]
fn a_cliff_alone_fails_a_level() {
    let dir = tempdir("pillar-cliff");
    let r = dir.join("r.json");
    let port = free_port();
    let out = run_bounded(
        &mut load_toy(
            port,
            &[
                "--levels",
                "1,2",
                "--rounds",
                "10",
                "--factor",
                "1.5",
                "--report",
                p(&r),
            ],
            // Level 1 answers calls 1-10; the 15th (in level 2) stalls 3 s.
            &["--call", "sleep:20ms", "--stall-once", "15:3s"],
        ),
        Duration::from_secs(90),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = json(&r);
    let l = levels(&report);
    assert_eq!(l[0]["verdict"], "pass", "{:#}", l[0]);
    assert_eq!(l[1]["counts"]["ok"], 20, "{:#}", l[1]);
    assert_eq!(l[1]["health_after"], 200, "{:#}", l[1]);
    assert_eq!(l[1]["restarted"], false, "{:#}", l[1]);
    assert_eq!(l[1]["verdict"], "fail", "{:#}", l[1]);
    // The cliff is the one reason.
    let reasons = l[1]["reasons"].as_array().unwrap();
    assert_eq!(reasons.len(), 1, "{:#}", l[1]);
    assert!(reasons[0].as_str().unwrap().contains("cliff"), "{:#}", l[1]);
}

// ---- exit 124 as a timer -------------------------------------------------------------------------

/// A process that exits 124 without a word, at an age no round timer explains (3.3 s): its exit
/// status says a timer fired, and its age is that timer.
#[test]
fn a_silent_exit_124_is_a_timer_at_the_process_s_age() {
    let dir = tempdir("pillar-124");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--report", p(&r), "--", "sh", "-c"])
            .arg("sleep 3.3; exit 124"),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    let report = json(&r);
    let s = report["suspicions"].as_array().expect("suspicions");
    let exit = report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "exit")
        .cloned()
        .expect("the exit");
    let pid = &exit["pid"];
    let claim = s
        .iter()
        .find(|c| c["subject"] == "process_exit" && &c["pid"] == pid)
        .unwrap_or_else(|| panic!("no timer claimed for the exit of pid {pid}: {s:#?}"));
    let (age, timer) = (
        claim["seconds"].as_f64().unwrap(),
        claim["timer_s"].as_f64().unwrap(),
    );
    assert!(
        (3.2..=age + 0.05).contains(&timer),
        "the timer is the process's age ({age} s), not {timer} s: {claim:#}"
    );
}

// ---- secrets out of the journal's event lines ----------------------------------------------------

/// A credential given with `--header-env` is in the server's command line too (as a server started
/// with its token as an argument is): the spawn event's command, and every other line of the
/// journal, holds `***` in its place.
#[test]
fn a_secret_in_the_server_s_command_line_is_in_no_journal_line() {
    let dir = tempdir("pillar-scrub");
    let (j, r) = (dir.join("j.jsonl"), dir.join("r.json"));
    let port = free_port();
    let token = format!("tok-pillar-{}-s3cr3t", std::process::id());
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1", "--rounds", "2"])
            .args(["--header-env", "X-Api-Key=PILLAR_TOKEN"])
            .args(["--journal", p(&j), "--report", p(&r)])
            .args(["--", "sh", "-c", "exec \"$0\" --port \"$1\""])
            .arg(toy())
            .arg(port.to_string())
            .arg(&token)
            .env("PILLAR_TOKEN", &token),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let text = std::fs::read_to_string(&j).unwrap();
    let spawn = text
        .lines()
        .filter_map(journal_value)
        .find(|l| l["kind"] == "spawn")
        .expect("the spawn event");
    assert!(spawn.to_string().contains("***"), "{spawn:#}");
    for (n, line) in text.lines().enumerate() {
        assert!(
            !line.contains(&token),
            "journal line {n} holds the secret: {line}"
        );
    }
}

// ---- HTTP/2 streams at once, as the server sees them ---------------------------------------------

/// An h2c server (hyper, prior knowledge) that answers /health at once and every other path after
/// 50 ms, counting the /call streams it serves at once: (port, most at once, connections accepted).
fn h2c_server() -> (
    u16,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let most = Arc::new(AtomicU64::new(0));
    let conns = Arc::new(AtomicU64::new(0));
    let now = Arc::new(AtomicU64::new(0));
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let (m, c) = (most.clone(), conns.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((sock, _)) = l.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::Relaxed);
                let (m, now) = (m.clone(), now.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let (m, now) = (m.clone(), now.clone());
                        async move {
                            if req.uri().path() != "/call" {
                                return Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                                ));
                            }
                            let at = now.fetch_add(1, Ordering::SeqCst) + 1;
                            m.fetch_max(at, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            now.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
                });
            }
        });
    });
    (port, most, conns)
}

/// `witness load --http2` at 8 workers against an h2c server that counts what it serves: the
/// server sees several streams at once, on one connection.
#[test]
fn http2_streams_are_served_at_once_as_the_server_counts_them() {
    use std::sync::atomic::Ordering;
    let dir = tempdir("pillar-h2");
    let r = dir.join("r.json");
    let (port, most, conns) = h2c_server();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args([
                "--http2",
                "--levels",
                "8",
                "--rounds",
                "5",
                "--report",
                p(&r),
            ]),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let l = levels(&json(&r));
    assert_eq!(l[0]["counts"]["ok"], 40, "{:#}", l[0]);
    let most = most.load(Ordering::SeqCst);
    eprintln!(
        "the server served at most {most} streams at once, over {} connections",
        conns.load(Ordering::Relaxed)
    );
    assert!(most >= 4, "at most {most} of 8 streams at once: {err}");
}

// ---- the table in docs/reliability.md ------------------------------------------------------------

/// The "Pillars of the seed" table: each row names a product file that exists and tests that exist
/// (`module::function`, the module a file of tests/ named in tests/main.rs).
#[test]
fn the_pillars_table_names_tests_that_exist() {
    let doc = std::fs::read_to_string(repo().join("docs/reliability.md")).unwrap();
    let main = std::fs::read_to_string(repo().join("tests/main.rs")).unwrap();
    let section = doc
        .split("### Pillars of the seed")
        .nth(1)
        .expect("a \"Pillars of the seed\" section in docs/reliability.md");
    let rows: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    assert!(rows.len() >= 20, "{} rows: {rows:#?}", rows.len());
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    for row in rows {
        // `\|` is a pipe inside a cell.
        let row = row.replace("\\|", "¦");
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 3, "promise | mutation | test: {row}");
        let file = ticked(cells[1])
            .into_iter()
            .find(|t| t.starts_with("src/"))
            .unwrap_or_else(|| panic!("no src/ file named in the mutation: {row}"));
        assert!(repo().join(&file).is_file(), "{file} does not exist: {row}");
        let tests: Vec<String> = ticked(cells[2])
            .into_iter()
            .filter(|t| t.contains("::"))
            .collect();
        assert!(!tests.is_empty(), "no test named: {row}");
        for t in tests {
            let (module, name) = t.split_once("::").unwrap();
            assert!(
                main.lines().any(|l| l.trim() == format!("mod {module};")),
                "tests/main.rs has no `mod {module};` ({t})"
            );
            let src = std::fs::read_to_string(repo().join(format!("tests/{module}.rs")))
                .unwrap_or_else(|e| panic!("tests/{module}.rs ({t}): {e}"));
            assert!(
                src.contains(&format!("fn {name}(")),
                "no test {name} in tests/{module}.rs: {row}"
            );
        }
    }
}

/// The cargo mutants table in docs/reliability.md names unit tests that exist, in the module it
/// names (`verdict::tests::NAME` is `fn NAME` in src/analyze/verdict.rs).
#[test]
fn the_mutants_table_names_unit_tests_that_exist() {
    let doc = std::fs::read_to_string(repo().join("docs/reliability.md")).unwrap();
    let section = doc
        .split("### cargo mutants on the pillars' code")
        .nth(1)
        .expect("a cargo mutants section in docs/reliability.md");
    let rows: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    let mut named = 0;
    for row in rows.iter().filter(|r| r.contains("| red |")) {
        let test = row
            .split('`')
            .rfind(|t| t.contains("::tests::"))
            .unwrap_or_else(|| panic!("no test named: {row}"));
        let (module, name) = test.split_once("::tests::").unwrap();
        let src = std::fs::read_to_string(repo().join(format!("src/analyze/{module}.rs")))
            .unwrap_or_else(|e| panic!("{module}: {e}"));
        assert!(
            src.contains(&format!("fn {name}()")),
            "{test} does not exist"
        );
        named += 1;
    }
    assert!(named >= 8, "{named} tests named");
}
