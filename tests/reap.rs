//! witness wrap as a subreaper: the orphans a server leaves are re-parented to witness and reaped
//! by pid, while witness still gets its own child's exit status (no blanket wait steals it).

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// Zombie children of `parent`, from /proc.
fn zombie_children(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let mut f = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        if f.next() == Some("Z") && f.next().and_then(|p| p.parse().ok()) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn orphans_of_the_server_are_reaped_and_the_servers_own_status_is_kept() {
    let dir = tempdir("reap");
    let j = dir.join("j.jsonl");
    // Three orphans (each `( … & )` subshell exits at once), then the server, which exits 7.
    let script = format!(
        "(sh -c 'exit 0' &); (sh -c 'exit 0' &); (sh -c 'exit 0' &); exec {} --port 0 --die-after 1500ms --die-code 7",
        toy().display()
    );
    let child = Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(&j)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let me = child.id() as i32;
    wait_until("the server to start", Duration::from_secs(10), || {
        std::fs::read_to_string(&j).is_ok_and(|t| t.contains("listening"))
            || std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"spawn\""))
    });
    wait_until(
        "no zombie children of witness",
        Duration::from_secs(5),
        || zombie_children(me).is_empty(),
    );
    let out = wait_bounded(child, Duration::from_secs(20));
    assert_eq!(
        out.status.code(),
        Some(7),
        "witness still has its own child's status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let notes: Vec<String> = journal_lines(&j)
        .iter()
        .filter(|e| e["kind"] == "note")
        .filter_map(|e| e["text"].as_str().map(str::to_string))
        .collect();
    let reaped: u64 = notes
        .iter()
        .filter_map(|t| {
            t.strip_prefix("reaped ")?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(reaped >= 3, "three orphans reaped: {notes:?}");
}
