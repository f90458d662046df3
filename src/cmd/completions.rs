//! `witness completions SHELL`: a completion script generated from the same clap definitions as
//! `--help` and the man pages, so a renamed flag is renamed in all three.

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};

pub fn run(args: CompletionsArgs) -> anyhow::Result<i32> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "witness", &mut out);
    crate::out::write_bytes(crate::out::To::Stdout, &out);
    Ok(0)
}
