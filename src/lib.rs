//! witness: load-test a server while watching it, so that no number it prints is really a measurement
//! of the harness. One journal of events on one clock; every verdict and view is a pure function of it
//! (docs/design.md).

pub mod analyze;
pub mod cli;
pub mod cmd;
pub mod error;
pub mod files;
pub mod journal;
pub mod load;
pub mod observe;
pub mod out;
pub mod rank;
pub mod report;
pub mod runs;
pub mod sample;
pub mod secrets;
pub mod server;
pub mod soak;
pub mod sources;
pub mod stats;
pub mod units;

/// Runs one subcommand; returns witness's exit code.
pub async fn run(cli: cli::Cli) -> anyhow::Result<i32> {
    match cli.command {
        cli::Command::Wrap(args) => cmd::wrap::run(*args).await,
        cli::Command::Load(args) => cmd::load::run(*args).await,
        cli::Command::Replay(args) => cmd::replay::run(*args).await,
        cli::Command::Soak(args) => cmd::soak::run(*args).await,
        cli::Command::Report(args) => cmd::report::run(args),
        cli::Command::Compare(args) => cmd::compare::run(args),
        cli::Command::Mcp(args) => cmd::mcp::run(args).await,
        cli::Command::Gpu(args) => cmd::gpu::run(args),
        cli::Command::Completions(args) => cmd::completions::run(args),
        cli::Command::Man(args) => cmd::man::run(args),
    }
}
