//! The soak: a long mixed workload from a TOML plan (`plan/`: the file as written, its parser,
//! validation and templates) run by scheduled workers with per-interval invariants, gauges
//! (`gauge.rs`) and injected faults (`run.rs`), health asked by URL or MCP ping (`health.rs`). Its
//! pure analysis lives in `analyze/soak.rs`, as the ladder's lives in `analyze/verdict.rs`.

pub mod gauge;
pub mod health;
pub mod plan;
pub mod run;
