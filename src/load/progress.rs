//! Live progress within a level, on a terminal: elapsed time, requests done by outcome, and how many
//! are in flight, so a level waiting on a 30 s timeout never sits silent. Counted by the workers as
//! they go (atomics, off the journal); the level's verdict still comes from the journal afterwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::journal::Outcome;

/// Counts of one level so far, shared by its workers.
#[derive(Default, Debug)]
pub struct Tally {
    pub ok: AtomicU64,
    pub timeout: AtomicU64,
    pub error: AtomicU64,
    pub rejected: AtomicU64,
    pub in_flight: AtomicU64,
}

impl Tally {
    pub fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub fn finished(&self, outcome: &Outcome) {
        let c = match outcome {
            Outcome::Ok => &self.ok,
            Outcome::Timeout { .. } => &self.timeout,
            Outcome::Error { .. } => &self.error,
            Outcome::Rejected { .. } => &self.rejected,
        };
        c.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// The progress line: `level 2 (n=4)  3.2s  ok=7 timeout=0 error=1 rejected=0  in flight=4`;
    /// `what` is `n=4`, or an open-loop level's rate (`200/s`).
    pub fn line(&self, level: u32, what: &str, elapsed: Duration) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "level {} ({what})  {:.1}s  ok={} timeout={} error={} rejected={}  in flight={}",
            level + 1,
            elapsed.as_secs_f64(),
            g(&self.ok),
            g(&self.timeout),
            g(&self.error),
            g(&self.rejected),
            g(&self.in_flight),
        )
    }
}

/// The live line of the level running now: a spinner redrawn every 100 ms on a terminal, nothing
/// otherwise (a log file gets the level's row when it ends, not a stream of redraws).
pub struct LevelProgress {
    pub tally: Arc<Tally>,
    ticker: Option<(indicatif::ProgressBar, tokio::task::JoinHandle<()>)>,
}

impl LevelProgress {
    /// `live` is whether stderr is a terminal (the caller decides, so tests can drive both ways).
    pub fn start(live: bool, level: u32, what: String) -> Self {
        let tally = Arc::new(Tally::default());
        let ticker = live.then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            let (b, t) = (bar.clone(), tally.clone());
            let start = Instant::now();
            let task = tokio::spawn(async move {
                loop {
                    b.set_message(t.line(level, &what, start.elapsed()));
                    b.tick();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            (bar, task)
        });
        Self { tally, ticker }
    }

    /// Whether there is a live line to count for (otherwise nobody reads the tally).
    pub fn is_live(&self) -> bool {
        self.ticker.is_some()
    }

    /// Clears the live line (the level's row replaces it).
    pub fn finish(self) {}
}

/// Also when the level is cut short (Ctrl-C drops the running level): no ticker outlives it.
impl Drop for LevelProgress {
    fn drop(&mut self) {
        if let Some((bar, task)) = self.ticker.take() {
            task.abort();
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{ErrorKind, TimeoutPhase};

    #[test]
    fn the_line_counts_each_outcome_and_what_is_still_in_flight() {
        let t = Tally::default();
        for _ in 0..5 {
            t.started();
        }
        t.finished(&Outcome::Ok);
        t.finished(&Outcome::Timeout {
            phase: TimeoutPhase::Request,
            limit_s: 30.0,
        });
        t.finished(&Outcome::Error {
            error: ErrorKind::Reset,
            status: None,
        });
        assert_eq!(
            t.line(1, "n=4", Duration::from_millis(3240)),
            "level 2 (n=4)  3.2s  ok=1 timeout=1 error=1 rejected=0  in flight=2"
        );
    }
}
