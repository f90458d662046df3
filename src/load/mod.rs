//! The load driver: the hyper client and outcome classification, health probes, the connect floor,
//! the concurrency ladder, and the soak (its plan and its engine).

pub mod client;
pub mod floor;
pub mod health;
pub mod ladder;
pub mod outcome;
pub mod plan;
pub mod soak;
