//! `devstack completion bash|zsh|fish`: the shell completion script of
//! every subcommand and flag, generated from the command line's own
//! definition (clap_complete), on standard output.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

/// `devstack completion SHELL`.
#[derive(Args)]
#[command(after_help = "Load it in the running shell: `source <(devstack completion bash)` (bash, zsh) or \
                        `devstack completion fish | source`; or write it where the shell looks for completions.")]
pub struct Completion {
    /// The shell: bash, zsh or fish.
    #[arg(value_parser = ["bash", "zsh", "fish"])]
    shell: String,
}

impl Completion {
    pub async fn run(self, _: &crate::Context) -> Result<ExitCode> {
        let shell: Shell = self.shell.parse().map_err(|e: String| crate::usage(e))?;
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut crate::Cli::command(), "devstack", &mut script);
        out!("{}", String::from_utf8_lossy(&script))?;
        Ok(ExitCode::SUCCESS)
    }
}
