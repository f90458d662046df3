//! Samplers: periodic readings of the server's resources (process, container, GPU, user gauges), each
//! turned into journal events on the run's clock. Every sampler has the same shape, [`Sampler`], and
//! one loop ([`spawn_sampling`]) drives them all at the chosen interval.

pub mod container;
pub mod gpu;
pub mod kin;
pub mod listen;
pub mod proc;

use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::journal::{Event, Journal};

/// A source of periodic readings. `sample` is called once per interval; whatever events it returns go
/// into the journal stamped with the time the reading was taken.
pub trait Sampler: Send + 'static {
    /// A short name for messages ("process", "container", "gpu").
    fn name(&self) -> &'static str;
    fn sample(&mut self) -> BoxFuture<'_, Vec<Event>>;
}

/// Which pids the server is right now (its identity can change under a restart).
pub type PidSource = Box<dyn Fn() -> Option<u32> + Send + Sync>;

/// Runs every sampler each `interval` until the handle is stopped or dropped.
pub struct Sampling {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampling {
    /// Stops after one last reading, so "after" figures exist.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

pub fn spawn_sampling(
    mut samplers: Vec<Box<dyn Sampler>>,
    journal: Journal,
    interval: Duration,
) -> Sampling {
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                _ = stopped.changed() => true,
            };
            for s in samplers.iter_mut() {
                let t = journal.now_s();
                for e in s.sample().await {
                    journal.emit_at(t, e);
                }
            }
            if last || *stopped.borrow() {
                return;
            }
        }
    });
    Sampling { stop, task }
}
