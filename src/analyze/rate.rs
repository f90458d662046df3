//! What an open-loop level's schedule was and how it was kept, and what a `--find-limit` search
//! found: the rows verdict.rs and the views carry (open.rs works them out from the journal).

use serde::Serialize;

use crate::journal::{rate_words, secs, Event, Record};

/// A send more than this behind its intended time is late.
pub const LATE_S: f64 = 0.010;
/// witness fell behind when more than this share of a level's sends were late, and at least
/// [`BEHIND_MIN`] of them (a scheduler hiccup or two in a short level is not a level not offered).
pub const BEHIND_SHARE: f64 = 0.05;
pub const BEHIND_MIN: u64 = 5;
/// A rate level fails when the server served less than the offered rate by more than this.
pub const SERVED_TOLERANCE: f64 = 0.10;

/// An open-loop level's schedule and how it was kept.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateRow {
    pub rate_per_s: f64,
    pub arrivals: String,
    pub seed: u64,
    pub max_in_flight: u32,
    pub duration_s: f64,
    /// Requests sent (journalled).
    pub sent: u64,
    /// Of `sent`, those that went more than [`LATE_S`] after their intended time.
    pub late: u64,
    /// The latest a send went behind its intended time.
    pub max_late_s: f64,
    /// Ok answers per second, from the first intended send to the last ok answer (or over the
    /// schedule's duration, if that is longer).
    pub served_per_s: Option<f64>,
    /// The served rate may fall short of the offered by this share (0.1: 10 %).
    pub tolerance: f64,
    /// Set when witness could not keep the schedule, in words with the figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind: Option<String>,
    /// `witness replay`: the speed the recording was played at (its arrivals are `replay`); the
    /// level is named by it, and held to the recorded latencies instead of a served rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed: Option<f64>,
    #[serde(skip)]
    first_due_s: Option<f64>,
    #[serde(skip)]
    last_ok_s: Option<f64>,
}

impl RateRow {
    /// The row of a `rate_level` event.
    pub fn new(e: &Event) -> Option<Self> {
        let Event::RateLevel {
            rate_per_s,
            arrivals,
            seed,
            max_in_flight,
            duration_s,
            ..
        } = e
        else {
            return None;
        };
        Some(Self {
            rate_per_s: *rate_per_s,
            arrivals: arrivals.clone(),
            seed: *seed,
            max_in_flight: *max_in_flight,
            duration_s: *duration_s,
            sent: 0,
            late: 0,
            max_late_s: 0.0,
            served_per_s: None,
            tolerance: SERVED_TOLERANCE,
            behind: None,
            speed: None,
            first_due_s: None,
            last_ok_s: None,
        })
    }

    /// Folds one of the level's requests in.
    pub fn request(&mut self, r: &Record) {
        let Event::Request {
            start_s,
            scheduled_s,
            outcome,
            ..
        } = &r.event
        else {
            return;
        };
        self.sent += 1;
        if let Some(due) = scheduled_s {
            let late = start_s - due;
            self.late += (late > LATE_S) as u64;
            self.max_late_s = self.max_late_s.max(late);
            self.first_due_s = Some(self.first_due_s.map_or(*due, |f| f.min(*due)));
        }
        if outcome.is_ok() {
            self.last_ok_s = Some(self.last_ok_s.map_or(r.t_s, |l| l.max(r.t_s)));
        }
    }

    /// The served rate and whether witness kept the schedule: the reasons the level fails, if any.
    /// The served rate is held to the rate the schedule drew (sends made and not sent over the
    /// duration): a Poisson schedule's count varies around the nominal rate.
    pub fn finish(&mut self, ok: u64, not_sent: u64) -> Vec<String> {
        let mut reasons = Vec::new();
        if let (Some(first), Some(last)) = (self.first_due_s, self.last_ok_s) {
            let span = (last - first).max(self.duration_s).max(1e-6);
            self.served_per_s = Some(ok as f64 / span);
        }
        let drawn = (self.sent + not_sent) as f64 / self.duration_s.max(1e-6);
        let poisson = self.arrivals == "poisson";
        let offered = if poisson && (drawn - self.rate_per_s).abs() > 0.01 * self.rate_per_s {
            format!(
                "{} ({} as drawn)",
                rate_words(self.rate_per_s),
                rate_words(drawn)
            )
        } else {
            rate_words(self.rate_per_s)
        };
        if self.late >= BEHIND_MIN && self.late as f64 > BEHIND_SHARE * self.sent as f64 {
            let share = 100.0 * self.late as f64 / self.sent as f64;
            let words = format!(
                "witness fell behind: {share:.0} % of sends more than {} late (the latest {} late; in-flight cap {}): {offered} was not offered as scheduled, and this level's latencies are partly the harness's",
                secs(LATE_S),
                secs(self.max_late_s),
                self.max_in_flight
            );
            self.behind = Some(words.clone());
            reasons.push(words);
        }
        // A replay's calls come in its recorded bursts and pauses: a served rate over its span
        // says little; its calls are held to their recorded latencies (analyze/answers.rs).
        let replay = self.arrivals == "replay";
        if let Some(served) = self.served_per_s.filter(|_| !replay) {
            if served < drawn.min(self.rate_per_s) * (1.0 - self.tolerance) {
                reasons.push(format!(
                    "served {} of the {offered} offered (more than {:.0} % short): the server did not keep up",
                    rate_words(served),
                    self.tolerance * 100.0
                ));
            }
        }
        reasons
    }
}

/// What a `--find-limit` search found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Limit {
    /// `rates` or `levels`.
    pub over: String,
    pub resolution: f64,
    pub max_levels: u32,
    /// The highest level that passed below the lowest that failed (requests/s or concurrency).
    pub holds: Option<f64>,
    /// The lowest level that failed.
    pub fails_at: Option<f64>,
    /// The search ended on the server, not on a verdict: what happened (no limit is claimed).
    pub ended: Option<String>,
    /// The lowest failing level failed because witness fell behind its schedule: what was found
    /// is witness's own limit, and the server held at least `holds` (the run does not pass).
    pub witness_bound: bool,
    /// The finding in one sentence.
    pub words: String,
}
