//! `witness man [SUBCOMMAND]`: a man page (roff) generated from the same clap definitions as
//! `--help` and the completions. `witness man` is witness(1); `witness man load` is witness-load(1),
//! as git names its subcommands' pages.

use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};
use crate::error::usage;

pub fn run(args: ManArgs) -> anyhow::Result<i32> {
    let mut cmd = Cli::command();
    cmd.build();
    let page = match &args.subcommand {
        None => cmd,
        Some(name) => {
            let Some(sub) = cmd.find_subcommand(name) else {
                let names: Vec<&str> = cmd
                    .get_subcommands()
                    .map(|c| c.get_name())
                    .filter(|n| *n != "help")
                    .collect();
                return Err(usage(format!(
                    "witness man {name}: no such subcommand; give one of {}",
                    names.join(", ")
                )));
            };
            let full = format!("witness-{name}");
            sub.clone().name(full.clone()).bin_name(full)
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    crate::out::write_bytes(crate::out::To::Stdout, &out);
    Ok(0)
}
