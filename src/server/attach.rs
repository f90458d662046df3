//! The attach target: the server is whatever process listens on the URL's port, started by someone
//! else (often a supervisor loop). witness never owns it; it watches the listener's identity every
//! [`POLL`] and journals a change as an exit of the old process and a spawn of the new one, so a
//! restart behind witness's back is seen like a restart of its own child.
//!
//! What witness cannot see is said, never guessed: a /proc that cannot be read (out of file
//! descriptors) is "could not see", not "stopped listening"; a listener whose pid witness may not
//! read (another user's process) is identified by its listening socket's inode, and the journal
//! says why.

use std::time::Duration;

use tokio::sync::watch;

use super::{identity_of, look, Seen};
use crate::journal::{Event, Identity, Journal};

pub const POLL: Duration = Duration::from_millis(100);
/// A full listener look-up every this many polls (1 s).
const FULL_EVERY: u64 = 10;

pub struct Attach {
    pub port: u16,
    current: watch::Receiver<Option<Identity>>,
    task: tokio::task::JoinHandle<()>,
}

/// Seconds a process has been alive, from its /proc start time (0 for a socket-only identity,
/// whose start witness cannot read).
fn age_of(start_time: u64) -> Option<f64> {
    if start_time == 0 {
        return Some(0.0);
    }
    use procfs::Current;
    let boot = procfs::Uptime::current().ok()?.uptime;
    Some((boot - start_time as f64 / procfs::ticks_per_second() as f64).max(0.0))
}

fn spawn_event(id: &Identity, attempt: u32) -> Event {
    Event::Spawn {
        pid: id.pid,
        start_time: id.start_time,
        command: procfs::process::Process::new(id.pid as i32)
            .and_then(|p| p.cmdline())
            .unwrap_or_default(),
        attempt,
        container_id: None,
    }
}

impl Attach {
    pub fn start(port: u16, journal: Journal) -> Self {
        let mut said = Said::default();
        let seen = look(port);
        said.say(&journal, &seen);
        let first = seen.identity();
        if let Some(id) = &first {
            journal.emit(Event::Note {
                level: "info".into(),
                text: format!("attached to {id} listening on port {port}"),
            });
            // It started before witness did: its spawn lies before t=0, which is the truth.
            let age = age_of(id.start_time).unwrap_or(0.0);
            journal.emit_at(journal.now_s() - age, spawn_event(id, 0));
        }
        let (tx, current) = watch::channel(first);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            let mut attempt = 0;
            let mut polls = 0u64;
            let mut alive_t = journal.now_s();
            let mut seen_at: Option<(Identity, f64)> = tx.borrow().clone().map(|id| {
                let age = age_of(id.start_time).unwrap_or(0.0);
                (id, journal.now_s() - age)
            });
            loop {
                tick.tick().await;
                polls += 1;
                // Every poll, the cheap check: is the process we know still alive, with the same
                // start time? That catches a death within one poll. The full look-up (every socket
                // and every process's fds, which costs the server CPU under load) runs every
                // FULL_EVERY polls, or as soon as the known process is gone.
                let known = seen_at.as_ref().map(|(i, _)| i.clone());
                let full = polls.is_multiple_of(FULL_EVERY);
                let seen = tokio::task::spawn_blocking(move || match known {
                    Some(k) if !full && identity_of(k.pid).as_ref() == Some(&k) => {
                        Seen::Listener(k)
                    }
                    _ => look(port),
                })
                .await
                .unwrap_or_else(|e| Seen::Unseen(e.to_string()));
                said.say(&journal, &seen);
                if matches!(seen, Seen::Unseen(_)) {
                    // Not seeing is not evidence of anything: keep what was last seen.
                    continue;
                }
                let now = seen.identity();
                if now.as_ref() == seen_at.as_ref().map(|(i, _)| i) {
                    alive_t = journal.now_s();
                    continue;
                }
                let t = journal.now_s();
                // It ended between the last look that saw it and this one: the middle of the two,
                // so its age is off by half a poll either way, not a whole poll late.
                let ended_t = if seen_at.is_some() {
                    (alive_t + t) / 2.0
                } else {
                    t
                };
                if let Some((old, spawned_t)) = seen_at.take() {
                    journal.emit_at(
                        ended_t,
                        Event::Exit {
                            pid: old.pid,
                            code: None,
                            signal: None,
                            core_dumped: false,
                            age_s: ended_t - spawned_t,
                            status: -1,
                            requested: false,
                            meaning: if old.pid == 0 {
                                format!(
                                    "the listening socket on port {port} went away ({old}): the server stopped or restarted (its pid could not be read; seen within {}ms)",
                                    POLL.as_millis()
                                )
                            } else {
                                format!(
                                    "stopped listening on port {port} (not witness's child: its exit status is unknown; seen within {}ms)",
                                    POLL.as_millis()
                                )
                            },
                            oom_killed: None,
                        },
                    );
                }
                if let Some(new) = &now {
                    attempt += 1;
                    let age = age_of(new.start_time).unwrap_or(0.0);
                    journal.emit_at(t - age, spawn_event(new, attempt));
                    seen_at = Some((new.clone(), t - age));
                }
                let _ = tx.send(now);
            }
        });
        Self {
            port,
            current,
            task,
        }
    }

    pub fn identity(&self) -> Option<Identity> {
        self.current.borrow().clone()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

/// Says once each thing witness cannot see, so the journal tells "could not see" from "not there".
#[derive(Default)]
struct Said {
    unseen: bool,
    socket_only: bool,
}

impl Said {
    fn say(&mut self, journal: &Journal, seen: &Seen) {
        let (flag, text) = match seen {
            Seen::Unseen(why) => (
                &mut self.unseen,
                format!("could not see the listener ({why}): not taken as 'stopped listening'"),
            ),
            Seen::SocketOnly { why, .. } => (
                &mut self.socket_only,
                format!("identity could not be read: {why}"),
            ),
            _ => return,
        };
        if !*flag {
            *flag = true;
            journal.emit(Event::Note {
                level: "warn".into(),
                text,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Header;

    #[test]
    fn what_witness_cannot_see_is_said_once_and_never_as_not_listening() {
        let dir = std::env::temp_dir().join(format!("witness-attach-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let j = Journal::create(&dir.join("j.jsonl"), &Header::new("load", vec![])).unwrap();
        let mut said = Said::default();
        let unseen = Seen::Unseen("could not read /proc/net/tcp: Too many open files".into());
        said.say(&j, &unseen);
        said.say(&j, &unseen);
        assert_eq!(unseen.identity(), None);
        let notes: Vec<String> = j
            .lifecycle()
            .into_iter()
            .filter_map(|r| match r.event {
                Event::Note { text, .. } => Some(text),
                _ => None,
            })
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("could not see the listener"),
            "{notes:?}"
        );
        assert!(notes[0].contains("not taken as 'stopped listening'"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
