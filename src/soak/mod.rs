//! The soak: a long mixed workload from a TOML plan (`plan.rs`) run by scheduled workers with
//! per-interval invariants, gauges and injected faults (`run.rs`). Its pure analysis lives in
//! `analyze/soak.rs`, as the ladder's lives in `analyze/verdict.rs`.

pub mod plan;
pub mod run;
