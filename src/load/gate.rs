//! Never the harness's wait: an exchange that would go while the server witness supervises is down
//! (it exited and a restart is on its way) waits for the new process before its clock starts, so no
//! ok exchange's duration holds time when no server process ran. The load ladder's workers (HTTP,
//! MCP over HTTP and over stdio) and the soak's all pass here before each exchange.

use std::time::Instant;

use tokio::sync::watch;

use crate::server::process::State;

/// What the wait came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// A server process runs: send now. `waited`: the exchange waited for a restart to get there.
    Go { waited: bool },
    /// The server is gone for good (nothing restarts it).
    Gone,
    /// `until` came first: the exchange is not sent.
    Expired,
}

/// Waits while the supervised server is down, until a process runs again, it is gone for good, or
/// `until` passes.
pub async fn server_up(state: &mut watch::Receiver<State>, until: Option<Instant>) -> Gate {
    let settled = |s: &State| matches!(s, State::Running(_) | State::Finished { .. });
    let gate = |s: &State, waited: bool| match s {
        State::Finished { .. } => Gate::Gone,
        _ => Gate::Go { waited },
    };
    {
        let now = state.borrow();
        if settled(&now) {
            return gate(&now, false);
        }
    }
    let wait = state.wait_for(settled);
    let got = match until {
        Some(t) => match tokio::time::timeout_at(t.into(), wait).await {
            Ok(r) => r.map(|s| gate(&s, true)),
            Err(_) => return Gate::Expired,
        },
        None => wait.await.map(|s| gate(&s, true)),
    };
    // The supervisor itself is gone: so is the server.
    got.unwrap_or(Gate::Gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn running() -> State {
        State::Running(crate::journal::Identity {
            pid: 7,
            start_time: 1,
            container_id: None,
            container_started_at: None,
            socket_inode: None,
        })
    }

    #[tokio::test]
    async fn an_exchange_waits_out_a_restart_and_goes_to_the_new_process() {
        let (tx, mut rx) = watch::channel(running());
        assert_eq!(server_up(&mut rx, None).await, Gate::Go { waited: false });
        tx.send_replace(State::Down { status: 124 });
        let back = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send_replace(running());
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send_replace(State::Down { status: 1 });
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send_replace(State::Finished { status: 1 });
            tx
        });
        let t = Instant::now();
        assert_eq!(server_up(&mut rx, None).await, Gate::Go { waited: true });
        assert!(t.elapsed() >= Duration::from_millis(40));
        tokio::time::sleep(Duration::from_millis(70)).await;
        let soon = Instant::now() + Duration::from_millis(10);
        assert_eq!(server_up(&mut rx, Some(soon)).await, Gate::Expired);
        assert_eq!(server_up(&mut rx, None).await, Gate::Gone);
        drop(back.await);
    }
}
