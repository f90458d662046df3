//! The load driver: the hyper client and outcome classification, health probes, the connect floor,
//! the concurrency ladder.

pub mod client;
pub mod fds;
pub mod floor;
pub mod health;
pub mod ladder;
pub mod outcome;
pub mod progress;
