//! The reaper's one promise, checked deterministically: it reaps zombie children witness did not
//! spawn, and never one witness registered as its own (whose status tokio is about to collect).
//! Alone in its test binary on purpose: reaping takes every unregistered zombie child of the test
//! process, which would include the children of any test running beside it.

use std::process::Command;
use std::time::{Duration, Instant};

use witness::server::reaper;

fn is_zombie(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next()
        == Some("Z")
}

#[test]
fn the_reaper_takes_an_orphan_but_never_a_registered_child() {
    let mut guard = reaper::spawn_guard();
    let mut own = Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
    guard.register(own.id());
    drop(guard);
    // An unregistered child stands in for an orphan re-parented to witness.
    let stray = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
    let stray_pid = stray.id();
    drop(stray);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(is_zombie(own.id()) && is_zombie(stray_pid)) {
        assert!(
            Instant::now() < deadline,
            "both children should have exited"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(reaper::reap_orphans(), vec![stray_pid]);
    assert!(!is_zombie(stray_pid), "the orphan is gone");
    assert_eq!(
        own.wait().unwrap().code(),
        Some(7),
        "the registered child's status is still there to collect"
    );
    reaper::forget(own.id());
}
